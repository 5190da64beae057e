#pragma once
// The launcher's environment, read: rendezvous_from_env, launcher_rendezvous_address and torch_env_from_launcher
// (the public API, hiercoll/store.hpp) are defined in environment.cpp beside what the engine reads of it here.
#include <string>

namespace hiercoll::launch {

/// The host serving the job's store as the launch environment names it (HIERCOLL_STORE=tcp://host:port, else
/// MASTER_ADDR), "" where it names none (a file store, a store handed in by the caller): the route there tells the
/// data NICs from the others.
std::string rendezvous_host_from_env();

}  // namespace hiercoll::launch
