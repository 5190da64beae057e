#pragma once
// Small text helpers the error messages and logs share.
#include <string>
#include <string_view>

namespace hiercoll::base {

/// Appends `item` to a list being built in `list`, after `separator` unless the list is still empty: the
/// "a, b, c" of an error message that names what it tried or what is missing.
inline void append_listed(std::string& list, std::string_view item, std::string_view separator = ", ") {
  if (!list.empty()) list.append(separator);
  list.append(item);
}

}  // namespace hiercoll::base
