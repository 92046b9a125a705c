#!/usr/bin/env bash
# The lint stage of .ci/run; fails on any drift, naming the file:
#   clang-format 14 (Debian 12's; .clang-format: Google base, 100 columns) over every C++/CUDA file,
#   ruff (pinned in scripts/requirements-test.txt; pyproject.toml [tool.ruff]) over every Python
#   file, shellcheck (warnings and errors; notes are style) over every shell script, and
#   scripts/check_floors.py (no include or CMake source that goes up a floor).
# Files: those git tracks plus the untracked ones it does not ignore. Needs scripts/setup.sh --test.
set -euo pipefail
cd "$(dirname "$0")/.."
files() { git ls-files --cached --others --exclude-standard "$@"; }
version=$(clang-format --version | grep -o 'version [0-9]*' | cut -d' ' -f2)
if [[ $version != 14 ]]; then
  echo "lint.sh: clang-format $version found, 14 expected (Debian 12's clang-format)" >&2
  exit 1
fi
mapfile -t cxx < <(files '*.cpp' '*.h' '*.cu' '*.cuh' '*.hpp')
clang-format --dry-run --Werror "${cxx[@]}"
mapfile -t py < <(files '*.py')
.venv/bin/ruff check --quiet "${py[@]}"
mapfile -t sh < <(files '*.sh' .ci/run)
shellcheck --severity=warning "${sh[@]}"
# no room reaches up a floor (scripts/floors.json: the layering of docs/architecture.md)
python3 scripts/check_floors.py
echo "lint.sh: ${#cxx[@]} C++/CUDA, ${#py[@]} Python and ${#sh[@]} shell files clean"
