#include "base/env.hpp"

#include <cerrno>
#include <cstdlib>
#include <limits>

#include "hiercoll/errors.hpp"

namespace hiercoll::base {

std::optional<std::string> env_string(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

int64_t env_int(const char* name, int64_t fallback) {
  auto text = env_string(name);
  if (!text) return fallback;
  char* end = nullptr;
  errno = 0;
  long long value = std::strtoll(text->c_str(), &end, 10);
  if (end == text->c_str() || *end != '\0') {
    throw InvalidUsageError(std::string(name) + "='" + *text + "' is not an integer");
  }
  if (errno == ERANGE) throw InvalidUsageError(std::string(name) + "='" + *text + "' is out of range");
  return value;
}

int64_t env_int_in(const char* name, int64_t fallback, int64_t low, int64_t high) {
  const int64_t value = env_int(name, fallback);
  if (value < low || value > high) {
    throw InvalidUsageError(std::string(name) + "=" + std::to_string(value) + " is out of range (" +
                            std::to_string(low) + " to " + std::to_string(high) + ")");
  }
  return value;
}

uint64_t parse_bytes(const std::string& text, const std::string& what) {
  char* end = nullptr;
  errno = 0;
  unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str() || text[0] == '-') throw InvalidUsageError(what + "='" + text + "' is not a byte count");
  std::string suffix(end);
  int shift = 0;
  if (suffix == "K" || suffix == "k") shift = 10;
  else if (suffix == "M" || suffix == "m") shift = 20;
  else if (suffix == "G" || suffix == "g") shift = 30;
  else if (!suffix.empty())
    throw InvalidUsageError(what + "='" + text + "': unknown suffix '" + suffix + "' (K, M, G)");
  if (errno == ERANGE || value > (std::numeric_limits<uint64_t>::max() >> shift)) {
    throw InvalidUsageError(what + "='" + text + "' is out of range");
  }
  return value << shift;
}

uint64_t env_bytes(const char* name, uint64_t fallback) {
  auto text = env_string(name);
  return text ? parse_bytes(*text, name) : fallback;
}

}  // namespace hiercoll::base
