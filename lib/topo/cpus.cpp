#include "topo/cpus.hpp"

#include <sched.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <map>
#include <utility>

namespace hiercoll::topo {

int cpus_for_local_ranks() {
  cpu_set_t set;
  CPU_ZERO(&set);
  const int allowed = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  if (allowed > 1) return allowed;
  return static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
}

namespace {

constexpr char kHex[] = "0123456789abcdef";

// The affinity mask as hex digits, CPU 0 in the lowest bit of the first digit (so the string reads in CPU order,
// four CPUs a digit), trailing zero digits dropped.
std::string mask_text() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return "";
  std::string text;
  for (int first = 0; first < CPU_SETSIZE; first += 4) {
    int digit = 0;
    for (int bit = 0; bit < 4; ++bit) {
      if (CPU_ISSET(first + bit, &set)) digit |= 1 << bit;
    }
    text += kHex[digit];
  }
  text.erase(text.find_last_not_of('0') + 1);
  return text;
}

struct Share {
  std::string machine;
  std::vector<uint8_t> digits;  // 4 CPUs each, as mask_text writes them
  int cpus = 0;
};

Share parse(const std::string& text) {
  Share share;
  const size_t space = text.find(' ');
  if (space == std::string::npos || space == 0) return share;
  share.machine = text.substr(0, space);
  for (size_t i = space + 1; i < text.size(); ++i) {
    const char* at = std::find(kHex, kHex + 16, text[i]);
    if (at == kHex + 16) return Share{};
    const auto digit = static_cast<uint8_t>(at - kHex);
    share.digits.push_back(digit);
    share.cpus += __builtin_popcount(digit);
  }
  return share;
}

bool overlap(const Share& a, const Share& b) {
  const size_t n = std::min(a.digits.size(), b.digits.size());
  for (size_t i = 0; i < n; ++i) {
    if ((a.digits[i] & b.digits[i]) != 0) return true;
  }
  return false;
}

std::string host_name() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

std::string boot_id() {
  std::ifstream file("/proc/sys/kernel/random/boot_id");
  std::string id;
  return file >> id ? id : "";
}

}  // namespace

std::string node_identity(const std::string& host_name, const std::string& boot_id, const std::string& shm_device) {
  std::string id = boot_id.empty() ? host_name : host_name + "/" + boot_id;
  return shm_device.empty() ? id : id + "/shm:" + shm_device;
}

std::string node_identity() {
  struct stat shm {};
  const std::string device =
      stat("/dev/shm", &shm) == 0 ? std::to_string(major(shm.st_dev)) + ":" + std::to_string(minor(shm.st_dev)) : "";
  return node_identity(host_name(), boot_id(), device);
}

std::string host_identity() { return node_identity(host_name(), boot_id()); }

std::string cpu_share() {
  const std::string id = boot_id();
  return id.empty() ? "" : id + " " + mask_text();
}

std::vector<int> share_cpus(const std::string& text) {
  const Share share = parse(text);
  std::vector<int> cpus;
  for (size_t i = 0; i < share.digits.size(); ++i) {
    for (int bit = 0; bit < 4; ++bit) {
      if (share.digits[i] & (1 << bit)) cpus.push_back(static_cast<int>(i) * 4 + bit);
    }
  }
  return cpus;
}

double ranks_per_cpu(const std::vector<std::string>& shares) {
  // Distinct shares first (ranks launched alike publish the same one), then, per machine, each against the others:
  // thousands of ranks make a few distinct shares per machine.
  std::map<std::string, int> ranks_of;
  for (const std::string& text : shares) ++ranks_of[text];
  std::map<std::string, std::vector<std::pair<Share, int>>> machines;
  for (const auto& [text, ranks] : ranks_of) {
    Share share = parse(text);
    if (!share.machine.empty() && share.cpus > 0) machines[share.machine].emplace_back(std::move(share), ranks);
  }
  double most = 0;
  for (const auto& [machine, group] : machines) {
    for (const auto& [mine, unused] : group) {
      int sharing = 0;
      for (const auto& [other, ranks] : group) {
        if (overlap(mine, other)) sharing += ranks;
      }
      most = std::max(most, static_cast<double>(sharing) / mine.cpus);
    }
  }
  return most > 0 ? most : 1;
}

}  // namespace hiercoll::topo
