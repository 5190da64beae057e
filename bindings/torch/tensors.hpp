#pragma once
// How the binding reads c10d's arguments: tensor types and reduce ops in hiercoll's terms, the checks every call
// makes, and where a tensor's data is worked on (in place, or a host copy). Shared by the binding's call files.
#include <ATen/ATen.h>

#include <torch/csrc/distributed/c10d/Types.hpp>
#include <vector>

#include "completion.hpp"
#include "hiercoll/communicator.hpp"

namespace hiercoll_torch {

/// hiercoll's type of `t`'s elements; raises naming `op` for a type hiercoll does not reduce.
hiercoll::DataType data_type(const at::Tensor& t, const char* op);
/// hiercoll's reduction for c10d's `op` on `t` (bool tensors reduce as bytes: SUM/MAX are "or", PRODUCT/MIN "and").
hiercoll::ReduceOp reduce_op(const c10d::ReduceOp& op, const at::Tensor& t, const char* name);
/// PREMUL_SUM's factor as a scalar tensor on `t`'s device and type; undefined for every other op.
at::Tensor premul_factor(const c10d::ReduceOp& op, const at::Tensor& t);
/// The input a reduction reads: `t`, or for PREMUL_SUM a scaled copy.
at::Tensor premultiplied(const at::Tensor& t, const c10d::ReduceOp& op);
/// PREMUL_SUM's scaling, in place, on a buffer the reduction overwrites anyway.
void premultiply_(at::Tensor& t, const c10d::ReduceOp& op);
/// Raises naming `op` unless `t` is a defined, dense, contiguous CPU or CUDA tensor.
void check_tensor(const at::Tensor& t, const char* op);
/// The one tensor of a per-process list, checked.
at::Tensor& single(std::vector<at::Tensor>& tensors, const char* op);
void check_same_kind(const at::Tensor& a, const at::Tensor& b, const char* op);
/// Whether hiercoll works on this tensor where it is (a CUDA tensor with hiercoll's device path).
bool on_device(const at::Tensor& t);
/// Whether this build hands CUDA tensors to hiercoll's device path (hiercoll and torch both built with CUDA); else
/// every CUDA tensor is staged through a host copy.
bool cuda_tensors_in_place_built();
/// The caller's current stream, for device collectives (ordered after it, as ProcessGroupNCCL's).
hiercoll::CallOptions stream_of(const at::Tensor& t);
/// The memory hiercoll reads and writes: the tensor itself on CPU, else a host copy.
at::Tensor host(const at::Tensor& t);
/// The tensor itself where on_device() or on CPU, else a host copy.
at::Tensor working(const at::Tensor& t);
/// A call whose result hiercoll writes to `h` (the caller's `t`, or a host copy of it) after reading `inputs`.
CallTensors staged(const at::Tensor& t, const at::Tensor& h, std::vector<at::Tensor> inputs = {});

}  // namespace hiercoll_torch
