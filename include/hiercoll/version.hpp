#pragma once
#include "hiercoll/export.hpp"

namespace hiercoll {
/// The library's version, "major.minor.patch", from the VERSION file it was built from.
HIERCOLL_API const char* version();
}  // namespace hiercoll
