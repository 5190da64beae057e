// The Python extension hiercoll_torch._C: the creator torch.distributed calls for backend "hiercoll".
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include <c10/util/Logging.h>

#include <chrono>
#include <functional>

#include "hiercoll/runtime.hpp"
#include "hiercoll/store.hpp"
#include "hiercoll/version.hpp"
#include "hooks.hpp"
#include "process_group.hpp"
#include "tensors.hpp"

namespace py = pybind11;

namespace {
// The hiercoll process group behind a torch Backend, for the module's functions that take one from Python.
hiercoll_torch::ProcessGroupHiercoll& group_of(const c10::intrusive_ptr<hiercoll_torch::compat::BackendBase>& group) {
  auto* ours = dynamic_cast<hiercoll_torch::ProcessGroupHiercoll*>(group.get());
  TORCH_CHECK(ours != nullptr, "not a hiercoll process group");
  return *ours;
}

hiercoll::Communicator& communicator_of(const c10::intrusive_ptr<hiercoll_torch::compat::BackendBase>& group) {
  return group_of(group).communicator();
}

// The creator torch.distributed calls for backend "hiercoll", and what the extension was built as.
void define_backend(py::module_& m) {
  m.doc() = "hiercoll's torch.distributed backend";
  m.def(
      "create_backend",
      [](const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::duration<float> timeout,
         const std::string& name, std::vector<uint64_t> global_ranks, bool deferred) {
        return hiercoll_torch::create_backend(store, rank, size,
                                              std::chrono::duration_cast<std::chrono::milliseconds>(timeout), name,
                                              std::move(global_ranks), deferred);
      },
      py::arg("store"), py::arg("rank"), py::arg("size"), py::arg("timeout"), py::arg("name") = "world",
      py::arg("global_ranks") = std::vector<uint64_t>(), py::arg("deferred") = false,
      // Joining blocks on the store and on peers: let other Python threads run meanwhile.
      py::call_guard<py::gil_scoped_release>());
  m.attr("__version__") = hiercoll::version();
  m.attr("__torch_version__") = HIERCOLL_TORCH_BUILT_FOR;  // the torch this extension was compiled against
}

// What a group records and chooses, for hiercoll_torch and the tests.
void define_group_queries(py::module_& m) {
  m.attr("records_flight_natively") = py::bool_(hiercoll_torch::GroupRecord::native());
  m.def(
      "_record_flight",
      [](const c10::intrusive_ptr<hiercoll_torch::compat::BackendBase>& group, std::optional<bool> on) {
        hiercoll_torch::GroupRecord* record = group_of(group).flight_record();
        if (record != nullptr && on) record->enable(*on);
        return record != nullptr && record->enabled();
      },
      py::arg("group"), py::arg("on") = std::nullopt,
      "Whether the group's calls go into torch's flight record natively; `on` turns that on or off (the benchmark's "
      "recorder-off column).");
  m.def(
      "allreduce_algorithm",
      [](const c10::intrusive_ptr<hiercoll_torch::compat::BackendBase>& group, size_t bytes) {
        return communicator_of(group).allreduce_algorithm(bytes);
      },
      "The allreduce algorithm hiercoll picks for a message of this many bytes (ring, rd, hier or sharded).");
  m.def(
      "flight_record",
      [](const c10::intrusive_ptr<hiercoll_torch::compat::BackendBase>& group) {
        return communicator_of(group).flight_record();
      },
      "This rank's last collectives as JSON (see Communicator::flight_record).");
}

// Benchmarks' probes: the same work as a torch call without torch around it (bench/torch/).
void define_probes(py::module_& m) {
  m.def(
      "_record_calls",
      [](const c10::intrusive_ptr<hiercoll_torch::compat::BackendBase>& group, at::Tensor tensor, int calls) {
        hiercoll_torch::ProcessGroupHiercoll& ours = group_of(group);
        TORCH_CHECK(calls > 0, "_record_calls: calls must be positive, got ", calls);
        hiercoll_torch::GroupRecord* record = ours.flight_record();
        TORCH_CHECK(record != nullptr, "_record_calls: this build does not record natively");
        const std::vector<at::Tensor> tensors{tensor};
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) {
          // What a recorded all_reduce asks of torch's recorder, and nothing else: its entry, then its retirement.
          hiercoll_torch::GroupRecord::retire(record->record(ours, c10d::OpType::ALLREDUCE, 0, false, tensors, tensors),
                                              0.0f);
        }
        return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / calls;
      },
      py::arg("group"), py::arg("tensor"), py::arg("calls"), py::call_guard<py::gil_scoped_release>(),
      "A benchmark's probe: `calls` entries recorded and retired in torch's flight recorder as an in-place all_reduce "
      "of `tensor` records them, with no collective (sequence number 0: they stand out in a dump), without the GIL as "
      "torch's own call runs; microseconds per entry. bench/torch/recorder_cost.py sets it beside the recorded "
      "call: what torch's record() costs alone.");
  m.def(
      "_collective_calls",
      [](const c10::intrusive_ptr<hiercoll_torch::compat::BackendBase>& group, const std::string& op, at::Tensor input,
         at::Tensor output, int calls) {
        hiercoll::Communicator& comm = communicator_of(group);
        for (const at::Tensor* t : {&input, &output}) {
          TORCH_CHECK(t->is_cpu() && t->is_contiguous() && t->scalar_type() == at::kFloat,
                      "_collective_calls: contiguous float32 CPU tensors");
        }
        TORCH_CHECK(calls > 0, "_collective_calls: calls must be positive, got ", calls);
        const auto in = static_cast<size_t>(input.numel());
        const auto out = static_cast<size_t>(output.numel());
        const auto n = static_cast<size_t>(comm.size());
        // The call dist's function of the same name makes (its tensors' sizes checked as torch checks them).
        std::function<hiercoll::Work()> call;
        if (op == "all_reduce") {
          call = [&] {
            return comm.allreduce(output.data_ptr(), output.data_ptr(), out, hiercoll::DataType::kFloat32,
                                  hiercoll::ReduceOp::kSum);
          };
        } else if (op == "broadcast") {
          call = [&] {
            return comm.broadcast(output.data_ptr(), output.data_ptr(), out, hiercoll::DataType::kFloat32, 0);
          };
        } else if (op == "all_gather_into_tensor") {
          TORCH_CHECK(out == in * n, "_collective_calls: all_gather_into_tensor's output is ranks x input");
          call = [&] { return comm.allgather(input.data_ptr(), output.data_ptr(), in, hiercoll::DataType::kFloat32); };
        } else if (op == "reduce_scatter_tensor") {
          TORCH_CHECK(in == out * n, "_collective_calls: reduce_scatter_tensor's input is ranks x output");
          call = [&] {
            return comm.reduce_scatter(input.data_ptr(), output.data_ptr(), out, hiercoll::DataType::kFloat32,
                                       hiercoll::ReduceOp::kSum);
          };
        } else {
          TORCH_CHECK(false, "_collective_calls: unknown op '", op,
                      "' (all_reduce, broadcast, all_gather_into_tensor, reduce_scatter_tensor)");
        }
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) call().wait();
        return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / calls;
      },
      py::arg("group"), py::arg("op"), py::arg("input"), py::arg("output"), py::arg("calls"),
      py::call_guard<py::gil_scoped_release>(),
      "A benchmark's probe: `calls` blocking float32 calls of torch.distributed's `op` (all_reduce and broadcast in "
      "place on `output`, sums, root 0) through the group's communicator, the C++ API, from C++; microseconds per "
      "call. bench/torch/call_latency.py sets it beside the torch call on the same tensors in the same processes: "
      "the difference is what the binding adds.");
}

// The process around the groups: the launcher's environment, exit, what the process runs on.
void define_process(py::module_& m) {
  m.def(
      "torch_env_from_launcher",
      [](std::chrono::duration<float> timeout) {
        return hiercoll::torch_env_from_launcher(std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
      },
      py::arg("timeout"),
      "The torch.distributed variables an mpirun / srun process lacks (see hiercoll::torch_env_from_launcher).",
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "_quiesce",
      [](std::chrono::milliseconds dump_limit) {
        // A dump under way finishes before the interpreter goes (it may need the GIL, released here); bounded, so
        // that a dump stuck on a hung file system cannot hold the exit for ever.
        if (!hiercoll_torch::GroupHooks::close_for_exit(dump_limit)) {
          LOG(WARNING) << "hiercoll: torch's abort hooks (the flight recorder's dump) still run after "
                       << dump_limit.count() << " ms; exiting without them";
        }
        hiercoll_torch::CompletionThread::quiesce_all();
      },
      py::arg("dump_limit"),
      "Called at interpreter exit: no more abort hooks or future callbacks from hiercoll's threads; waits up to "
      "dump_limit for a flight-recorder dump under way.",
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "runtime_report",
      [] {
        const hiercoll::RuntimeReport r = hiercoll::runtime_report();
        py::dict d;
        d["version"] = r.version;
        d["libfabric_loaded"] = r.libfabric_loaded;
        d["libfabric_path"] = r.libfabric_path;
        d["libfabric_version"] = r.libfabric_version;
        d["providers"] = r.providers;
        d["libfabric_error"] = r.libfabric_error;
        d["hwloc_version"] = r.hwloc_version;
        d["pmix_version"] = r.pmix_version;
        d["device_buffers"] = r.device_buffers;
        d["cuda_tensors_in_place"] = hiercoll_torch::cuda_tensors_in_place_built();
        return d;
      },
      "What this process's hiercoll runs on (hiercoll::runtime_report) and whether CUDA tensors go in place "
      "(__torch_version__: the torch it was built for); python -m hiercoll_torch.check prints both.");
}
}  // namespace

PYBIND11_MODULE(_C, m) {
  define_backend(m);
  define_group_queries(m);
  define_probes(m);
  define_process(m);
}
