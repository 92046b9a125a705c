#!/bin/sh
# cli_links_no_cuda.sh CLI MODULE: the CLI binary has no DT_NEEDED entry for the CUDA runtime or
# cuBLAS(Lt), which only the CUDA module (libflashnorm_cuda.so, loaded with dlopen for the GPU) may
# need; and the module does need libcudart and libcublasLt, so the pattern below is the one the
# libraries really have (readelf -d, binutils).
set -u
cli=$1
module=$2
pattern='libcudart|libcublas|libcuda\.so'
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*Shared library: \[\(.*\)\]/\1/p'; }
cli_needed=$(needed "$cli") || { echo "readelf -d $cli failed"; exit 1; }
module_needed=$(needed "$module") || { echo "readelf -d $module failed"; exit 1; }
[ -n "$cli_needed" ] || { echo "no NEEDED entries read from $cli"; exit 1; }
status=0
if echo "$cli_needed" | grep -E "$pattern"; then
  echo "FAIL: $cli links the CUDA libraries above (they belong in the CUDA module)"
  status=1
fi
for lib in libcudart libcublasLt; do
  if ! echo "$module_needed" | grep -q "^$lib\.so"; then
    echo "FAIL: $module does not need $lib (NEEDED: $(echo $module_needed))"
    status=1
  fi
done
[ $status = 0 ] && echo "ok: $cli needs $(echo $cli_needed); the module needs $(echo "$module_needed" | grep -E "$pattern" | tr '\n' ' ')"
exit $status
