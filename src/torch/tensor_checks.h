// Validation shared by the flashnorm PyTorch ops (src/torch): every refused argument becomes one
// std::runtime_error line naming the op and the argument, which PyTorch raises as a RuntimeError
// (never a crash). Stable ABI only (torch/csrc/stable), so one build loads in several torch
// versions (TORCH_TARGET_VERSION in src/torch/CMakeLists.txt).
#pragma once

#include <fmt/format.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace flashnorm::torch_ops {

using torch::headeronly::ScalarType;
using Tensor = torch::stable::Tensor;

// Throws std::runtime_error("flashnorm::<op>: <message>") when !cond.
template <typename... Args>
void require(bool cond, std::string_view op, fmt::format_string<Args...> f, Args&&... args) {
  if (!cond) {
    throw std::runtime_error(
        fmt::format("flashnorm::{}: {}", op, fmt::format(f, std::forward<Args>(args)...)));
  }
}

// "float32", "bfloat16", "float16", or the enum value for any other type.
std::string dtype_name(ScalarType t);
// "[2, 3, 4]".
std::string shape_str(const Tensor& t);

// x of an activation op: a floating tensor (fp32, bf16 or fp16) with at least one dimension and a
// non-empty last dimension. Returns K = x.size(-1).
int64_t check_activation(const Tensor& x, std::string_view op);
// A 1-D tensor `name` of length n on x's device with x's dtype (gain, bias).
void check_vector(const Tensor& v, const Tensor& x, int64_t n, std::string_view name,
                  std::string_view op);
// x.shape with the last dimension replaced by n.
std::vector<int64_t> with_last(const Tensor& x, int64_t n);
// x.shape without its last dimension (the shape of a per-row result such as rstd).
std::vector<int64_t> leading_dims(const Tensor& x);
// x [..., K] as a dense float32 [rows, K] (a copy when x is not float32 or not contiguous).
Tensor rows_f32(const Tensor& x, int64_t K);

}  // namespace flashnorm::torch_ops

namespace flashnorm::torch_ops {

// The arguments of flashnorm_linear (x [..., K], w [N, K], scale_mask bool [N], bias [N]) checked
// against each other: dtype, device, shapes. Returns N.
int64_t check_linear(const Tensor& x, const Tensor& w, const std::optional<Tensor>& scale_mask,
                     const std::optional<Tensor>& bias);

}  // namespace flashnorm::torch_ops
