#!/usr/bin/env bash
# Installs what flashnorm needs to build and test on Debian 12 (run as root, or with sudo).
# Debian packages: toolchain, JSON, CLI parsing, BLAS, PCRE2, ICU (NFC), fmt, HTTP (cpp-httplib,
# for `serve`), GoogleTest, clang-format and shellcheck (scripts/lint.sh), clang
# for fuzzing; the CUTLASS headers from PyPI (scripts/fetch_cutlass.sh).
# PyPI packages (tests only, `scripts/setup.sh --test`): the reference implementations the tests
# compare against (gguf, safetensors), in a virtual environment .venv (Debian's own Python refuses
# pip installs outside one).
set -euo pipefail
pkgs=(cmake ninja-build g++ clang libclang-rt-14-dev pkg-config nlohmann-json3-dev libcli11-dev
      libopenblas-dev libpcre2-dev libicu-dev libfmt-dev libgtest-dev googletest python3-pip
      python3-venv libcpp-httplib-dev clang-format shellcheck)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The CUTLASS headers the fused prefill kernel is built on (pinned wheel, SHA-256 checked).
"$(cd "$(dirname "$0")" && pwd)/fetch_cutlass.sh" > /dev/null ||
  echo "setup.sh: no CUTLASS headers (no network?): the fused prefill kernel will not be built" >&2
if [ "${1:-}" = "--test" ]; then
  root="$(cd "$(dirname "$0")/.." && pwd)"
  [ -x "$root/.venv/bin/python3" ] || python3 -m venv "$root/.venv"
  "$root/.venv/bin/python3" -m pip install -q --disable-pip-version-check --no-cache-dir \
    -r "$root/scripts/requirements-test.txt"
fi
