#!/usr/bin/env bash
# Fills the ignored folder .cache/gpudeps that scripts/gpu_kernels.sh needs on the GPU machine
# (whose image lacks these): header-only fmt, nlohmann JSON, CLI11 and the GoogleTest headers and
# static library, copied from this machine's Debian packages (scripts/setup.sh installs them).
# Then run the device call with carry=[".cache/gpudeps"].
set -euo pipefail
cd "$(dirname "$0")/.."
d=.cache/gpudeps
rm -rf "$d"
mkdir -p "$d/include" "$d/lib"
for h in fmt nlohmann CLI gtest; do cp -r "/usr/include/$h" "$d/include/"; done
cp /usr/lib/x86_64-linux-gnu/libgtest.a /usr/lib/x86_64-linux-gnu/libgtest_main.a "$d/lib/"
echo "$d ready ($(du -sh "$d" | cut -f1))"
