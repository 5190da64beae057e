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
  if (!algo::is_kind(kind)) {
    out.append(algo::to_string(kind));
    return;
  }
  const algo::KindRow& row = algo::row_of(kind);
  if (!algo::has_buffers(row)) {  // a barrier: its name alone
    out.append(row.name);
    return;
  }
  describe_into(out, row.name, count, type, row.reduces ? &op : nullptr, row.rooted ? root : -1);
}

void describe_into(std::string& out, const CollectiveName& name) {
  describe_into(out, name.kind, name.count, name.type, name.op, name.root);
  if (algo::is_kind(name.kind) && !algo::has_buffers(algo::row_of(name.kind))) return;  // a barrier
  out.append(" [").append(algo::to_string(name.algorithm)).append(name.on_device ? ", device]" : "]");
}

}  // namespace hiercoll::record
