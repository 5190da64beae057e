// hiercoll_netdelay: adds a fixed one-way delay to the packets an iptables NFQUEUE rule hands it, for the emulated
// cluster (scripts/emulation/cluster) on kernels without netem. Every packet of the queue is held for DELAY microseconds
// after it was queued and then let through unchanged; the delay is constant, so packets leave in the order they
// came and a FIFO of (packet id, due time) is the whole schedule. Only packet metadata is copied to user space.
//
//   hiercoll_netdelay QUEUE DELAY_US     (inside the namespace whose traffic the rule queues)
//
// Install the rule with --queue-bypass, so that traffic passes undelayed rather than being dropped when this
// program is not running. Runs until SIGTERM / SIGINT.
#include <arpa/inet.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <sys/prctl.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>

namespace {

struct Held {
  uint32_t id;
  int64_t due_ns;
};

volatile std::sig_atomic_t stopping = 0;
std::deque<Held> held;
int64_t delay_ns = 0;

int64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

int on_packet(nfq_q_handle*, nfgenmsg*, nfq_data* packet, void*) {
  const nfqnl_msg_packet_hdr* header = nfq_get_msg_packet_hdr(packet);
  if (header != nullptr) held.push_back({ntohl(header->packet_id), now_ns() + delay_ns});
  return 0;
}

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "hiercoll_netdelay: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: hiercoll_netdelay QUEUE DELAY_US\n");
    return 2;
  }
  const int queue_number = std::atoi(argv[1]);
  delay_ns = static_cast<int64_t>(std::atof(argv[2]) * 1000);
  if (queue_number < 0 || delay_ns < 0) {
    std::fprintf(stderr, "hiercoll_netdelay: QUEUE and DELAY_US must not be negative\n");
    return 2;
  }
  std::signal(SIGTERM, [](int) { stopping = 1; });
  std::signal(SIGINT, [](int) { stopping = 1; });
  prctl(PR_SET_TIMERSLACK, 1UL);  // wake-ups within microseconds of the due time, not the default 50 µs late

  nfq_handle* handle = nfq_open();
  if (handle == nullptr) die("nfq_open");
  nfq_q_handle* queue = nfq_create_queue(handle, static_cast<uint16_t>(queue_number), on_packet, nullptr);
  if (queue == nullptr) die("nfq_create_queue (is another program bound to this queue?)");
  if (nfq_set_mode(queue, NFQNL_COPY_META, 0) < 0) die("nfq_set_mode");
  // Take segmentation-offload packets whole (up to 64 KB): otherwise the kernel cuts each into MTU-sized packets
  // first, and every one of those costs a round trip through this program.
  nfq_set_queue_flags(queue, NFQA_CFG_F_GSO, NFQA_CFG_F_GSO);
  nfq_set_queue_maxlen(queue, 65536);
  const int fd = nfq_fd(handle);
  nfnl_rcvbufsiz(nfq_nfnlh(handle), 8 << 20);

  alignas(8) static char buffer[1 << 16];
  while (stopping == 0) {
    // Let through everything that is due, then sleep until the next packet is due or another one arrives.
    const int64_t now = now_ns();
    while (!held.empty() && held.front().due_ns <= now) {
      nfq_set_verdict(queue, held.front().id, NF_ACCEPT, 0, nullptr);
      held.pop_front();
    }
    timespec wait{1, 0};
    if (!held.empty()) {
      const int64_t left = held.front().due_ns - now;
      wait = {static_cast<time_t>(left / 1'000'000'000), static_cast<long>(left % 1'000'000'000)};
    }
    pollfd p{fd, POLLIN, 0};
    const int ready = ppoll(&p, 1, &wait, nullptr);
    if (ready < 0 && errno != EINTR) die("ppoll");
    if (ready > 0) {
      // Drain what is queued: each recv returns one netlink batch of packets.
      for (;;) {
        const ssize_t got = recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
        if (got < 0) {
          if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
          if (errno == ENOBUFS) continue;  // the kernel dropped queue notices (their packets are lost): go on
          die("recv");
        }
        nfq_handle_packet(handle, buffer, static_cast<int>(got));
      }
    }
  }
  // Release what is still held before the queue goes away.
  for (const Held& h : held) nfq_set_verdict(queue, h.id, NF_ACCEPT, 0, nullptr);
  nfq_destroy_queue(queue);
  nfq_close(handle);
  return 0;
}
