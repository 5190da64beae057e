// Ring building blocks, pipelined in chunks so that sending chunk k+1 overlaps reducing chunk k and a
// chunk is forwarded the moment it is ready, not when its whole segment is.
#include <algorithm>
#include <cstring>

#include "algo/algorithms.hpp"
#include "reduce/reduce.hpp"

namespace hiercoll::algo {

// Each reserves its n parts first: the hierarchical allreduce cuts every piece so, and growing the vectors one
// element at a time showed in the library's own profile of small allreduces (scripts/bench/profile-cell).
Segments Segments::even(size_t total, int n) { return aligned(total, n, 1); }

Segments Segments::aligned(size_t total, int n, size_t multiple) {
  // Near-equal parts of whole units of `multiple` elements (the first units % n get one unit more), each clipped to
  // the total. With multiple 1 the clipping changes nothing: even().
  const size_t units = (total + multiple - 1) / multiple, parts = static_cast<size_t>(n);
  const size_t base = units / parts, extra = units % parts;
  Segments s;
  s.offset.reserve(parts);
  s.count.reserve(parts);
  size_t unit = 0;
  for (size_t i = 0; i < parts; ++i) {
    const size_t c = base + (i < extra ? 1 : 0);
    const size_t at = std::min(total, unit * multiple);
    s.offset.push_back(at);
    s.count.push_back(std::min(total - at, c * multiple));
    unit += c;
  }
  return s;
}

Segments Segments::blocks(size_t block, int n) {
  Segments s;
  s.offset.reserve(static_cast<size_t>(n));
  s.count.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    s.offset.push_back(block * static_cast<size_t>(i));
    s.count.push_back(block);
  }
  return s;
}

namespace {
int mod(int a, int n) { return ((a % n) + n) % n; }

size_t max_count(const Segments& segments) {
  return segments.count.empty() ? 0 : *std::max_element(segments.count.begin(), segments.count.end());
}

// Chunk c of a segment of `count` elements, cut into pieces of `chunk` elements (possibly empty).
std::pair<size_t, size_t> chunk_range(size_t count, size_t chunk, size_t c) {
  size_t begin = std::min(count, c * chunk);
  return {begin, std::min(count, begin + chunk) - begin};
}
}  // namespace

void ring_phase_reduce_scatter(Channel& ch, const void* in, void* work, void* own_out, const Segments& segments,
                               DataType type, ReduceOp op) {
  // Step s (0..n-2): send segment r-s-1 to the right, receive segment r-s-2 from the left and reduce it
  // with our own input. After the last step, segment r is complete.
  const int n = ch.size(), r = ch.rank();
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  const size_t elem = dtype_size(type);
  const size_t chunk = std::max<size_t>(1, ch.config().chunk_bytes / elem);
  const size_t chunks = std::max<size_t>(1, (max_count(segments) + chunk - 1) / chunk);
  const int steps = n - 1;
  const size_t units = static_cast<size_t>(steps) * chunks;
  const size_t slots = std::min<size_t>(static_cast<size_t>(std::max(1, ch.config().slots)), units);
  auto* slot_memory = static_cast<uint8_t*>(ch.scratch().get(slots * chunk * elem, 0));
  auto* in_bytes = static_cast<const uint8_t*>(in);
  auto* work_bytes = static_cast<uint8_t*>(work);

  auto bytes_at = [&](int segment, size_t element) { return (segments.offset[segment] + element) * elem; };
  auto post_recv = [&](size_t unit) {
    int s = static_cast<int>(unit / chunks);
    size_t len = chunk_range(segments.count[mod(r - s - 2, n)], chunk, unit % chunks).second;
    return ch.recv(left, static_cast<uint32_t>(unit), slot_memory + (unit % slots) * chunk * elem, len * elem);
  };
  auto post_send = [&](size_t unit, const uint8_t* base) {
    int s = static_cast<int>(unit / chunks);
    int segment = mod(r - s - 1, n);
    auto [begin, len] = chunk_range(segments.count[segment], chunk, unit % chunks);
    return ch.send(right, static_cast<uint32_t>(unit), base + bytes_at(segment, begin), len * elem);
  };

  std::vector<RequestPtr> recvs(units), sends;
  for (size_t u = 0; u < slots; ++u) recvs[u] = post_recv(u);
  for (size_t c = 0; c < chunks; ++c) sends.push_back(post_send(c, in_bytes));

  for (size_t u = 0; u < units; ++u) {
    ch.wait(recvs[u]);
    int s = static_cast<int>(u / chunks);
    int segment = mod(r - s - 2, n);
    auto [begin, len] = chunk_range(segments.count[segment], chunk, u % chunks);
    uint8_t* dst =
        (s == steps - 1) ? static_cast<uint8_t*>(own_out) + begin * elem : work_bytes + bytes_at(segment, begin);
    reduce::reduce(dst, in_bytes + bytes_at(segment, begin), slot_memory + (u % slots) * chunk * elem, len, type, op);
    recvs[u].reset();
    if (u + slots < units) recvs[u + slots] = post_recv(u + slots);  // the slot is free again
    if (s + 1 < steps) sends.push_back(post_send(u + chunks, work_bytes));
  }
  ch.wait_all(sends);
}

void ring_phase_allgather(Channel& ch, void* out, const Segments& segments, size_t elem) {
  // Step s (0..n-2): send segment r-s to the right, receive segment r-s-1 from the left straight into `out`.
  const int n = ch.size(), r = ch.rank();
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  const size_t chunk = std::max<size_t>(1, ch.config().chunk_bytes / elem);
  const size_t chunks = std::max<size_t>(1, (max_count(segments) + chunk - 1) / chunk);
  const size_t units = static_cast<size_t>(n - 1) * chunks;
  const size_t window = std::min<size_t>(units, 64);  // receives posted ahead
  auto* bytes = static_cast<uint8_t*>(out);

  auto post = [&](size_t unit, bool send) {
    int s = static_cast<int>(unit / chunks);
    int segment = mod(send ? r - s : r - s - 1, n);
    auto [begin, len] = chunk_range(segments.count[segment], chunk, unit % chunks);
    uint8_t* at = bytes + (segments.offset[segment] + begin) * elem;
    return send ? ch.send(right, static_cast<uint32_t>(unit), at, len * elem)
                : ch.recv(left, static_cast<uint32_t>(unit), at, len * elem);
  };

  std::vector<RequestPtr> recvs(units), sends;
  for (size_t u = 0; u < window; ++u) recvs[u] = post(u, false);
  for (size_t c = 0; c < chunks && c < units; ++c) sends.push_back(post(c, true));
  for (size_t u = 0; u < units; ++u) {
    ch.wait(recvs[u]);
    recvs[u].reset();
    if (u + window < units) recvs[u + window] = post(u + window, false);
    if (u + chunks < units) sends.push_back(post(u + chunks, true));
  }
  ch.wait_all(sends);
}

}  // namespace hiercoll::algo
