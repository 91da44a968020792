#pragma once
// Errors of the CUDA backend. A failing CUDA call is a CudaError naming the call and CUDA's own
// error name and text; "there is no GPU to run on" is the more specific GpuUnavailable, which the
// CLI turns into exit status 2 with that message.
#include <stdexcept>
#include <string>

namespace fragscope::cuda {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class GpuUnavailable : public CudaError {
 public:
  using CudaError::CudaError;
};

}  // namespace fragscope::cuda
