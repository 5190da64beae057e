#pragma once
// Hostile input for a server's parser: a stream of `frames` frames, even ones random bytes of random length (below
// `max_noise`), odd ones `valid` with one byte changed (so lengths, commands and tokens go wrong one field at a time).
#include <cstddef>
#include <cstdint>
#include <vector>

namespace hiercoll::test {

template <class Rng>
std::vector<uint8_t> fuzzed_frames(const std::vector<uint8_t>& valid, int frames, Rng& rng, size_t max_noise) {
  std::vector<uint8_t> bytes;
  for (int i = 0; i < frames; ++i) {
    std::vector<uint8_t> f = valid;
    if (i % 2 == 0) {
      f.resize(rng() % max_noise);
      for (auto& b : f) b = static_cast<uint8_t>(rng());
    } else {
      f[rng() % f.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
    }
    bytes.insert(bytes.end(), f.begin(), f.end());
  }
  return bytes;
}

}  // namespace hiercoll::test
