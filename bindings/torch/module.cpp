// The Python extension hiercoll_torch._C: the creator torch.distributed calls for backend "hiercoll".
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "hiercoll/store.hpp"
#include "hiercoll/version.hpp"
#include "process_group.hpp"

namespace py = pybind11;

namespace {
// The communicator behind a hiercoll process group, for the module's functions that take one from Python.
hiercoll::Communicator& communicator_of(const c10::intrusive_ptr<hiercoll_torch::compat::BackendBase>& group) {
  auto* ours = dynamic_cast<hiercoll_torch::ProcessGroupHiercoll*>(group.get());
  TORCH_CHECK(ours != nullptr, "not a hiercoll process group");
  return ours->communicator();
}
}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "hiercoll's torch.distributed backend";
  m.def(
      "create_backend",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::duration<float> timeout,
         const std::string& name) {
        return hiercoll_torch::create_backend(store, rank, size,
                                              std::chrono::duration_cast<std::chrono::milliseconds>(timeout), name);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("name") = "world",
      // Joining blocks on the store and on peers: let other Python threads run meanwhile.
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "allreduce_algorithm",
      [](const c10::intrusive_ptr<hiercoll_torch::compat::BackendBase>& group, size_t bytes) {
        return communicator_of(group).allreduce_algorithm(bytes);
      },
      "The allreduce algorithm hiercoll picks for a message of this many bytes (ring, rd or hier).");
  m.def(
      "flight_record",
      [](const c10::intrusive_ptr<hiercoll_torch::compat::BackendBase>& group) {
        return communicator_of(group).flight_record();
      },
      "This rank's last collectives as JSON (see Communicator::flight_record).");
  m.def(
      "_allreduce_calls",
      [](const c10::intrusive_ptr<hiercoll_torch::compat::BackendBase>& group, at::Tensor tensor, int calls) {
        hiercoll::Communicator& comm = communicator_of(group);
        TORCH_CHECK(tensor.is_cpu() && tensor.is_contiguous() && tensor.scalar_type() == at::kFloat,
                    "_allreduce_calls: a contiguous float32 CPU tensor");
        TORCH_CHECK(calls > 0, "_allreduce_calls: calls must be positive, got ", calls);
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) {
          comm.allreduce(tensor.data_ptr(), tensor.data_ptr(), static_cast<size_t>(tensor.numel()),
                         hiercoll::DataType::kFloat32, hiercoll::ReduceOp::kSum)
              .wait();
        }
        return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / calls;
      },
      py::arg("group"), py::arg("tensor"), py::arg("calls"), py::call_guard<py::gil_scoped_release>(),
      "A benchmark's probe: `calls` blocking in-place float32 sums of `tensor` through the group's communicator, the "
      "C++ API, from C++; microseconds per call. bench/torch/call_latency.py sets it beside dist.all_reduce on the "
      "same tensor in the same processes: the difference is what the binding adds.");
  m.def(
      "torch_env_from_launcher",
      [](std::chrono::duration<float> timeout) {
        return hiercoll::torch_env_from_launcher(std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
      },
      py::arg("timeout"),
      "The torch.distributed variables an mpirun / srun process lacks (see hiercoll::torch_env_from_launcher).",
      py::call_guard<py::gil_scoped_release>());
  m.def("_quiesce", &hiercoll_torch::CompletionThread::quiesce_all,
        "Called at interpreter exit: stop running future callbacks from hiercoll's threads.",
        py::call_guard<py::gil_scoped_release>());
  m.attr("__version__") = hiercoll::version();
}
