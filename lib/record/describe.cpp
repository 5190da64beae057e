// Operation names (describe.hpp).
#include "record/describe.hpp"

#include <charconv>

namespace hiercoll::record {

void describe_into(std::string& out, const char* name, size_t count, DataType type, const ReduceOp* op, int root) {
  char number[24];
  auto append_number = [&](long long v) { out.append(number, std::to_chars(number, number + sizeof(number), v).ptr); };
  out.append(name).append("(");
  append_number(static_cast<long long>(count));
  out.append(" x ").append(to_string(type)).append(")");
  if (op != nullptr) out.append(" ").append(to_string(*op));
  if (root >= 0) {
    out.append(" root ");
    append_number(root);
  }
}

void describe_into(std::string& out, algo::Kind kind, size_t count, DataType type, ReduceOp op, int root) {
  if (kind == algo::Kind::kBarrier) {
    out.append("barrier");
    return;
  }
  describe_into(out, algo::to_string(kind), count, type, has_op(kind) ? &op : nullptr, root);
}

void describe_into(std::string& out, const CollectiveName& name) {
  describe_into(out, name.kind, name.count, name.type, name.op, name.root);
  if (name.kind == algo::Kind::kBarrier) return;
  out.append(" [").append(algo::to_string(name.algorithm)).append(name.on_device ? ", device]" : "]");
}

}  // namespace hiercoll::record
