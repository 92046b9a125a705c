// The median every timing in flashnorm reports (the kernel tuners and benchmark, the CUDA
// engine's step profiler, `flashnorm bench --model`).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace flashnorm {

// The upper median of `v` (v[n / 2] of the sorted values: a value that was measured, never an
// average of two); NaN for an empty vector. T: float or double.
template <typename T>
T median(std::vector<T> v) {
  if (v.empty()) return std::numeric_limits<T>::quiet_NaN();
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace flashnorm
