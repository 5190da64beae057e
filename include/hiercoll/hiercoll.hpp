#pragma once
// Umbrella header of the hiercoll C++ API.
#include "hiercoll/bucketer.hpp"
#include "hiercoll/communicator.hpp"
#include "hiercoll/errors.hpp"
#include "hiercoll/runtime.hpp"
#include "hiercoll/store.hpp"
#include "hiercoll/topology.hpp"
#include "hiercoll/types.hpp"
#include "hiercoll/version.hpp"
