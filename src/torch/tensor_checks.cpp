#include "tensor_checks.h"

#include <torch/csrc/stable/ops.h>

namespace flashnorm::torch_ops {

std::string dtype_name(ScalarType t) {
  switch (t) {
    case ScalarType::Float:
      return "float32";
    case ScalarType::BFloat16:
      return "bfloat16";
    case ScalarType::Half:
      return "float16";
    case ScalarType::Double:
      return "float64";
    case ScalarType::Bool:
      return "bool";
    case ScalarType::Byte:
      return "uint8";
    default:
      return fmt::format("scalar type {}", static_cast<int>(t));
  }
}

std::string shape_str(const Tensor& t) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d) s += fmt::format("{}{}", d ? ", " : "", t.size(d));
  return s + "]";
}

int64_t check_activation(const Tensor& x, std::string_view op) {
  const ScalarType t = x.scalar_type();
  require(t == ScalarType::Float || t == ScalarType::BFloat16 || t == ScalarType::Half, op,
          "x must be float32, bfloat16 or float16, got {}", dtype_name(t));
  require(x.dim() >= 1, op, "x must have at least one dimension (features last), got a scalar");
  require(x.size(-1) >= 1, op, "x's last dimension must be non-empty, got shape {}", shape_str(x));
  return x.size(-1);
}

void check_vector(const Tensor& v, const Tensor& x, int64_t n, std::string_view name,
                  std::string_view op) {
  require(v.device() == x.device(), op, "{} must be on x's device", name);
  require(v.scalar_type() == x.scalar_type(), op, "{} must have x's dtype {}, got {}", name,
          dtype_name(x.scalar_type()), dtype_name(v.scalar_type()));
  require(v.dim() == 1 && v.size(0) == n, op, "{} must have shape [{}], got {}", name, n,
          shape_str(v));
}

Tensor rows_f32(const Tensor& x, int64_t K) {
  Tensor c = torch::stable::contiguous(x);
  if (c.scalar_type() != ScalarType::Float) c = torch::stable::to(c, ScalarType::Float);
  return torch::stable::reshape(c, {c.numel() / K, K});
}

std::vector<int64_t> with_last(const Tensor& x, int64_t n) {
  std::vector<int64_t> s(x.dim());
  for (int64_t d = 0; d < x.dim(); ++d) s[d] = x.size(d);
  s.back() = n;
  return s;
}

std::vector<int64_t> leading_dims(const Tensor& x) {
  std::vector<int64_t> s = with_last(x, 1);
  s.pop_back();
  return s;
}

}  // namespace flashnorm::torch_ops

namespace flashnorm::torch_ops {

int64_t check_linear(const Tensor& x, const Tensor& w, const std::optional<Tensor>& scale_mask,
                     const std::optional<Tensor>& bias) {
  constexpr std::string_view op = "flashnorm_linear";
  const int64_t K = check_activation(x, op);
  require(w.device() == x.device(), op, "w must be on x's device");
  require(w.scalar_type() == x.scalar_type(), op, "w must have x's dtype {}, got {}",
          dtype_name(x.scalar_type()), dtype_name(w.scalar_type()));
  require(w.dim() == 2 && w.size(1) == K, op,
          "w must have shape [N, {}] (x's last dimension), got {}", K, shape_str(w));
  const int64_t N = w.size(0);
  require(N >= 1, op, "w must have at least one row, got shape {}", shape_str(w));
  if (scale_mask) {
    require(scale_mask->device() == x.device(), op, "scale_mask must be on x's device");
    require(scale_mask->scalar_type() == ScalarType::Bool, op, "scale_mask must be bool, got {}",
            dtype_name(scale_mask->scalar_type()));
    require(scale_mask->dim() == 1 && scale_mask->size(0) == N, op,
            "scale_mask must have shape [{}] (w's rows), got {}", N, shape_str(*scale_mask));
  }
  if (bias) check_vector(*bias, x, N, "bias", op);
  return N;
}

}  // namespace flashnorm::torch_ops
