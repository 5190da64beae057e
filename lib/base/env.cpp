#include "base/env.hpp"

#include <cstdlib>

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
  long long value = std::strtoll(text->c_str(), &end, 10);
  if (end == text->c_str() || *end != '\0') {
    throw InvalidUsageError(std::string(name) + "='" + *text + "' is not an integer");
  }
  return value;
}

uint64_t parse_bytes(const std::string& text, const std::string& what) {
  char* end = nullptr;
  unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (end == text.c_str() || text[0] == '-') throw InvalidUsageError(what + "='" + text + "' is not a byte count");
  std::string suffix(end);
  if (suffix == "K" || suffix == "k") value <<= 10;
  else if (suffix == "M" || suffix == "m") value <<= 20;
  else if (suffix == "G" || suffix == "g") value <<= 30;
  else if (!suffix.empty())
    throw InvalidUsageError(what + "='" + text + "': unknown suffix '" + suffix + "' (K, M, G)");
  return value;
}

uint64_t env_bytes(const char* name, uint64_t fallback) {
  auto text = env_string(name);
  return text ? parse_bytes(*text, name) : fallback;
}

}  // namespace hiercoll::base
