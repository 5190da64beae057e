#pragma once
// Environment knobs, read the way NCCL reads NCCL_*: unset means default, a malformed value is an error
// that names the variable. Every knob is listed in docs/tuning.md.
#include <cstdint>
#include <optional>
#include <string>

namespace hiercoll::base {

std::optional<std::string> env_string(const char* name);
int64_t env_int(const char* name, int64_t fallback);
/// env_int, and an InvalidUsageError naming the variable unless low <= value <= high.
int64_t env_int_in(const char* name, int64_t fallback, int64_t low, int64_t high);
/// Byte counts accept K, M, G suffixes (powers of 1024): HIERCOLL_CHUNK_BYTES=512K.
uint64_t env_bytes(const char* name, uint64_t fallback);
/// Parses "64M"-style sizes; throws InvalidUsageError mentioning `what` on bad input.
uint64_t parse_bytes(const std::string& text, const std::string& what);

}  // namespace hiercoll::base
