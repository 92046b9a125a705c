#!/usr/bin/env python3
"""Dumps a GGUF file's metadata and tensor infos as JSON using the `gguf` Python package's
GGUFReader (pip `gguf`; an implementation independent of flashnorm). The C++ tests compare
flashnorm's reader (and writer) against this dump.

Usage: python3 gguf_dump_reference.py IN.gguf OUT.json

JSON: {"version", "alignment", "data_offset", "file_size",
       "kvs": [{"key", "offset", "type", "value"} ...],
       "tensors": [{"name", "dims", "type", "offset", "n_bytes", "info_offset"} ...]}
Strings (keys excepted) are hex of their raw bytes. Arrays: {"elem_type", "values": [...]};
nested arrays are not supported by GGUFReader's field layout and are refused here.
"""
import json
import os
import sys

import gguf

VT = gguf.GGUFValueType


def scalar(part, t):
    v = part[0]
    if t in (VT.FLOAT32, VT.FLOAT64):
        return float(v)
    if t == VT.BOOL:
        return bool(v)
    return int(v)


def main():
    path, out = sys.argv[1], sys.argv[2]
    r = gguf.GGUFReader(path)
    kvs = []
    for f in r.fields.values():
        if f.name.startswith("GGUF."):
            continue
        t = f.types[0]
        entry = {"key": f.name, "offset": int(f.offset), "type": t.name}
        if t == VT.STRING:
            entry["value"] = bytes(f.parts[f.data[0]]).hex()
        elif t == VT.ARRAY:
            et = VT(int(f.parts[3][0]))  # parts: key len, key, value type, elem type, count, ...
            if et == VT.ARRAY:
                raise SystemExit(f"{f.name}: nested arrays are not dumped")
            if et == VT.STRING:
                vals = [bytes(f.parts[i]).hex() for i in f.data]
            else:
                vals = [scalar(f.parts[i], et) for i in f.data]
            entry["value"] = {"elem_type": et.name, "values": vals}
        else:
            entry["value"] = scalar(f.parts[f.data[0]], t)
        kvs.append(entry)
    tensors = []
    for t in r.tensors:
        tensors.append({
            "name": t.name,
            "dims": [int(d) for d in t.shape],
            "type": t.tensor_type.name,
            "offset": int(t.data_offset) - int(r.data_offset),
            "n_bytes": int(t.n_bytes),
            "info_offset": int(t.field.offset),
        })
    doc = {
        "version": int(r.fields["GGUF.version"].parts[0][0]),
        "alignment": int(r.alignment),
        "data_offset": int(r.data_offset),
        "file_size": os.path.getsize(path),
        "kvs": kvs,
        "tensors": tensors,
    }
    with open(out, "w") as fh:
        json.dump(doc, fh)


if __name__ == "__main__":
    main()
