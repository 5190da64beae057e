#pragma once
// Endpoints of one provider, made in this process and joined as ranks 0..n-1, for the transport's unit tests.
#include <catch2/catch.hpp>

#include <functional>
#include <memory>
#include <vector>

#include "transport/transport.hpp"

namespace hiercoll::test {

using Endpoints = std::vector<std::unique_ptr<transport::Endpoint>>;

/// n endpoints from `open`, each connected to the addresses of all.
inline Endpoints connected(int n, const std::function<std::unique_ptr<transport::Endpoint>()>& open) {
  Endpoints endpoints;
  std::vector<std::vector<uint8_t>> addresses;
  for (int r = 0; r < n; ++r) {
    endpoints.push_back(open());
    addresses.push_back(endpoints.back()->address());
  }
  for (int r = 0; r < n; ++r) endpoints[static_cast<size_t>(r)]->connect(r, addresses);
  return endpoints;
}

/// `value`, once `request` (the receive that writes it) has completed; fails the test where it has not.
inline int received(const transport::RequestPtr& request, const int& value) {
  REQUIRE(request->state.load() == transport::Request::State::kDone);
  return value;
}

}  // namespace hiercoll::test
