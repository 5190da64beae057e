#include "tensors.hpp"

#include <c10/util/Exception.h>

#include <utility>
#ifdef HIERCOLL_TORCH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

namespace hiercoll_torch {

hiercoll::DataType data_type(const at::Tensor& t, const char* op) {
  switch (t.scalar_type()) {
    case at::kFloat: return hiercoll::DataType::kFloat32;
    case at::kDouble: return hiercoll::DataType::kFloat64;
    case at::kHalf: return hiercoll::DataType::kFloat16;
    case at::kBFloat16: return hiercoll::DataType::kBFloat16;
    case at::kChar: return hiercoll::DataType::kInt8;
    case at::kByte: return hiercoll::DataType::kUInt8;
    case at::kBool: return hiercoll::DataType::kUInt8;
    case at::kInt: return hiercoll::DataType::kInt32;
    case at::kLong: return hiercoll::DataType::kInt64;
    default:
      TORCH_CHECK(false, "hiercoll ", op, ": tensors of type ", t.scalar_type(),
                  " are not supported (float, double, half, bfloat16, int8, uint8, bool, int32, int64 are)");
  }
}

// bool tensors reduce as bytes: SUM and MAX are "or", PRODUCT and MIN are "and" (as ProcessGroupNCCL does).
hiercoll::ReduceOp reduce_op(const c10d::ReduceOp& op, const at::Tensor& t, const char* name) {
  const bool boolean = t.scalar_type() == at::kBool;
  switch (op.op_) {
    case c10d::ReduceOp::SUM: return boolean ? hiercoll::ReduceOp::kMax : hiercoll::ReduceOp::kSum;
    case c10d::ReduceOp::PRODUCT: return boolean ? hiercoll::ReduceOp::kMin : hiercoll::ReduceOp::kProd;
    case c10d::ReduceOp::MIN: return hiercoll::ReduceOp::kMin;
    case c10d::ReduceOp::MAX: return hiercoll::ReduceOp::kMax;
    case c10d::ReduceOp::AVG:  // hiercoll refuses it on integers, naming the type
      TORCH_CHECK(!boolean, "hiercoll ", name, ": AVG is not defined on bool tensors");
      return hiercoll::ReduceOp::kAvg;
    case c10d::ReduceOp::PREMUL_SUM:
      TORCH_CHECK(at::isFloatingType(t.scalar_type()), "hiercoll ", name,
                  ": PREMUL_SUM is defined on floating-point tensors, got ", t.scalar_type());
      return hiercoll::ReduceOp::kSum;  // of the inputs premultiplied by premultiplied()
    default:
      TORCH_CHECK(false, "hiercoll ", name, ": reduce op ", static_cast<int>(op.op_),
                  " is not supported (SUM, PRODUCT, MIN, MAX, AVG, PREMUL_SUM are)");
  }
}

// PREMUL_SUM (FSDP2 reduce-scatters gradients with it) sums every rank's input times a factor: the factor
// as a scalar tensor on `t`'s device and type, undefined for every other op.
at::Tensor premul_factor(const c10d::ReduceOp& op, const at::Tensor& t) {
  if (op.op_ != c10d::ReduceOp::PREMUL_SUM) return {};
  const auto* supplement = dynamic_cast<const c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
  TORCH_CHECK(supplement != nullptr, "hiercoll: PREMUL_SUM without its factor");
  if (supplement->tensor_factor.defined()) return supplement->tensor_factor.to(t.options()).reshape({});
  return at::scalar_tensor(supplement->double_factor, t.options());
}

// The input a reduction reads: `t` itself, or for PREMUL_SUM a scaled copy (the caller's input stays as it was).
at::Tensor premultiplied(const at::Tensor& t, const c10d::ReduceOp& op) {
  at::Tensor factor = premul_factor(op, t);
  return factor.defined() ? t * factor : t;
}

// The same for a buffer the reduction overwrites anyway (allreduce's in-place tensor, a fused staging copy).
void premultiply_(at::Tensor& t, const c10d::ReduceOp& op) {
  at::Tensor factor = premul_factor(op, t);
  if (factor.defined()) t.mul_(factor);
}

void check_tensor(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.defined(), "hiercoll ", op, ": undefined tensor");
  TORCH_CHECK(t.layout() == at::kStrided, "hiercoll ", op, ": only dense tensors are supported, got ", t.layout());
  TORCH_CHECK(t.is_contiguous(), "hiercoll ", op, ": tensors must be contiguous");
  TORCH_CHECK(t.is_cpu() || t.is_cuda(), "hiercoll ", op, ": tensors must be on CPU or CUDA, got ", t.device());
}

at::Tensor& single(std::vector<at::Tensor>& tensors, const char* op) {
  TORCH_CHECK(tensors.size() == 1, "hiercoll ", op, ": expects exactly one tensor per process, got ", tensors.size());
  check_tensor(tensors[0], op);
  return tensors[0];
}

void check_same_kind(const at::Tensor& a, const at::Tensor& b, const char* op) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), "hiercoll ", op, ": mismatched tensor types ", a.scalar_type(),
              " and ", b.scalar_type());
  TORCH_CHECK(a.device() == b.device(), "hiercoll ", op, ": tensors on different devices ", a.device(), " and ",
              b.device());
}

// CUDA tensors are used in place when hiercoll has its device path and torch has CUDA; otherwise, and for
// the calls built from point-to-point messages, they are staged through a host copy.
bool on_device(const at::Tensor& t) {
#ifdef HIERCOLL_TORCH_CUDA
  return t.is_cuda() && hiercoll::Communicator::device_buffers_supported();
#else
  (void)t;
  return false;
#endif
}

bool cuda_tensors_in_place_built() {
#ifdef HIERCOLL_TORCH_CUDA
  return true;
#else
  return false;
#endif
}

// Device collectives run after the work already on the caller's current stream, as with ProcessGroupNCCL.
hiercoll::CallOptions stream_of(const at::Tensor& t) {
  hiercoll::CallOptions options;
#ifdef HIERCOLL_TORCH_CUDA
  if (t.is_cuda()) options.stream = c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
#else
  (void)t;
#endif
  return options;
}

// The memory hiercoll reads and writes: the tensor itself on CPU (or on CUDA, see on_device), else a host copy.
at::Tensor host(const at::Tensor& t) { return t.is_cpu() ? t : t.to(at::kCPU); }
at::Tensor working(const at::Tensor& t) { return on_device(t) ? t : host(t); }
// A call whose result hiercoll writes to `h` (the caller's `t`, or a host copy of it) after reading `inputs`.
CallTensors staged(const at::Tensor& t, const at::Tensor& h, std::vector<at::Tensor> inputs) {
  CallTensors tensors;
  tensors.in_use = std::move(inputs);
  tensors.result_in(t, h);
  return tensors;
}

}  // namespace hiercoll_torch
