#!/usr/bin/env bash
# Fetches the CUTLASS 3.x/4.x C++ headers (header-only) that the fused prefill kernel
# (src/kernels/cuda/prefill_sm90.cu) is built on: the nvidia-cutlass wheel from PyPI, pinned and
# checked by SHA-256, into the ignored folder .cache/cutlass; its include/ is unpacked next to it.
# Offline machines (the GPU machine): carry .cache/cutlass/<wheel> and run this script there; it
# unpacks the carried wheel without the network. Prints the include directory.
set -euo pipefail
cd "$(dirname "$0")/.."
version=4.2.0.0
sha=f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6
dir=.cache/cutlass
wheel="$dir/nvidia_cutlass-$version-py3-none-any.whl"
mkdir -p "$dir"
if [ ! -f "$dir/include/cute/tensor.hpp" ] || [ "$(cat "$dir/version" 2>/dev/null)" != "$version" ]; then
  if [ ! -f "$wheel" ]; then
    python3 -m pip download -q --disable-pip-version-check --retries 1 --no-deps \
      "nvidia-cutlass==$version" -d "$dir" >&2
  fi
  if ! echo "$sha  $wheel" | sha256sum -c --quiet - >&2; then
    rm -f "$wheel"  # a corrupt or foreign download: fetched again next time
    echo "fetch_cutlass.sh: $wheel does not match its SHA-256" >&2
    exit 1
  fi
  rm -rf "$dir/include" "$dir/version"
  python3 - "$wheel" "$dir" <<'PY'
import sys, zipfile, os
wheel, out = sys.argv[1], sys.argv[2]
prefix = "cutlass_library/source/include/"
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith(prefix) and not name.endswith("/"):
            dest = os.path.join(out, "include", name[len(prefix):])
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with z.open(name) as src, open(dest, "wb") as dst:
                dst.write(src.read())
PY
  echo "$version" > "$dir/version"
fi
echo "$PWD/$dir/include"
