// throw_if_error (status.h).
#include "flashnorm/kernels/cuda/status.h"

#include "flashnorm/error.h"

namespace flashnorm::kernels::cuda {

void throw_if_error(const Status& s) {
  if (!s.ok()) throw flashnorm::Error(s.message);
}

}  // namespace flashnorm::kernels::cuda
