// Builds without HIERCOLL_WITH_CUDA: every buffer is host memory (CUDA tensors reach hiercoll only through
// the torch binding, which then stages them through host memory itself).
#include "gpu/device_path.hpp"
#include "hiercoll/errors.hpp"

namespace hiercoll::gpu {

Location locate(const void*) { return {}; }
bool device_path_built() { return false; }

std::unique_ptr<DevicePath> DevicePath::create(int, size_t) {
  throw InvalidUsageError("hiercoll was built without CUDA (HIERCOLL_WITH_CUDA=OFF): no device path");
}

}  // namespace hiercoll::gpu
