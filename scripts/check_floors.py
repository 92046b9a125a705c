"""Fails when a file of the product reaches up a floor (scripts/floors.json, docs/architecture.md).

Reads every C++/CUDA file under src/ and include/flashnorm/ (its #include "..." lines) and every
src/**/CMakeLists.txt (the paths it names under src/ or bench/). A header is placed in its room by
its path: flashnorm/ROOM/... -> ROOM, flashnorm/NAME.h -> base, ../ROOM/... and a path relative to
the including file -> the room it lies in, a bare name found only under bench/ -> bench. A room may
reach its own room and the rooms of lower floors; two rooms of one floor may not reach each other.
Entries of floors.json's "known" list are allowed, and one that no longer occurs fails the check
(the list only shrinks). Exit status 1 with one line per violation.
Usage: python3 scripts/check_floors.py [ROOT]
"""
import json
import re
import sys
from pathlib import Path

ROOT = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent)
SPEC = json.loads((ROOT / "scripts/floors.json").read_text())
FLOORS = SPEC["floors"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
CMAKE_PATH = re.compile(r"\$\{PROJECT_SOURCE_DIR\}/((?:src|bench)/[\w./-]+)|\.\./(\w+)/")


def room_of(path: Path) -> str:
    """The room of a file of the tree (path relative to ROOT)."""
    parts = path.parts
    if parts[0] == "bench":
        return "bench"
    if parts[0] == "include" and len(parts) > 2 and parts[1] == "flashnorm":
        return parts[2] if len(parts) > 3 else "base"
    if parts[0] == "src":
        return parts[1] if len(parts) > 2 else "base"
    return "outside"


def bench_headers() -> set:
    return {p.name for p in (ROOT / "bench").rglob("*.h")}


def resolve(src: Path, inc: str, in_bench: set) -> str:
    """The room of `inc` as included by `src`, or '' when it is not the project's."""
    if inc.startswith("flashnorm/"):
        return room_of(Path("include") / inc)
    local = (ROOT / src).parent / inc
    if local.exists():
        return room_of(local.resolve().relative_to(ROOT.resolve()))
    if Path(inc).name in in_bench and "/" not in inc:
        return "bench"
    return ""


def allowed(frm: str, to: str) -> bool:
    if to in ("", "outside") or frm == to:
        return True
    return FLOORS.get(to, 99) < FLOORS.get(frm, -1)


def main() -> int:
    in_bench = bench_headers()
    found = set()
    problems = []
    files = [p for d in ("src", "include/flashnorm") for p in (ROOT / d).rglob("*")
             if p.suffix in (".h", ".cpp", ".cu", ".cuh", ".hpp")]
    for f in sorted(files):
        rel = f.relative_to(ROOT)
        frm = room_of(rel)
        for inc in INCLUDE.findall(f.read_text(errors="replace")):
            to = resolve(rel, inc, in_bench)
            if not allowed(frm, to):
                found.add((str(rel), to))
                problems.append(f"{rel}: includes \"{inc}\" ({frm} reaches {to})")
    for f in sorted((ROOT / "src").rglob("CMakeLists.txt")):
        rel = f.relative_to(ROOT)
        frm = room_of(rel)
        for full, sibling in CMAKE_PATH.findall(f.read_text()):
            to = room_of(Path(full)) if full else sibling
            if not allowed(frm, to):
                found.add((str(rel), to))
                problems.append(f"{rel}: names {full or '../' + sibling} ({frm} reaches {to})")
    known = {(k["file"], k["reaches"]) for k in SPEC["known"]}
    bad = [p for p in problems if not any(p.startswith(k[0] + ":") and f"reaches {k[1]})" in p
                                          for k in known)]
    stale = sorted(known - found)
    for p in bad:
        print(f"check_floors: {p}")
    for file, to in stale:
        print(f"check_floors: scripts/floors.json lists {file} reaching {to}, which no longer "
              f"occurs: remove the entry")
    if bad or stale:
        return 1
    print(f"check_floors: {len(files)} files, rooms keep to their floors "
          f"({len(known)} known exceptions)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
