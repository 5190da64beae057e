// Store pieces shared by every implementation: wait(), PrefixStore, FileStore and open_store().
#include "hiercoll/store.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "base/backoff.hpp"
#include "base/text.hpp"
#include "hiercoll/errors.hpp"
#include "store/socket.hpp"

namespace hiercoll {

using store::Clock;

void Store::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  base::Backoff<std::chrono::milliseconds> backoff(std::chrono::milliseconds(1), std::chrono::milliseconds(50));
  while (!check(keys)) {
    if (Clock::now() >= deadline) {
      std::string missing;
      for (const auto& key : keys) {
        if (!check({key})) base::append_listed(missing, key);
      }
      throw TimeoutError("store: still missing after " + std::to_string(timeout.count()) + " ms: " + missing);
    }
    backoff.pause();
  }
}

Store::Bytes Store::get_within(const std::string& key, std::chrono::milliseconds timeout) {
  wait({key}, timeout);
  return get(key);
}

std::string Store::get_string(const std::string& key) {
  Bytes value = get(key);
  return std::string(value.begin(), value.end());
}

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : prefix_(std::move(prefix)), base_(std::move(base)) {
  timeout_ = base_->timeout();
}
void PrefixStore::set(const std::string& key, const Bytes& value) { base_->set(prefixed(key), value); }
Store::Bytes PrefixStore::get(const std::string& key) { return base_->get(prefixed(key)); }
int64_t PrefixStore::add(const std::string& key, int64_t delta) { return base_->add(prefixed(key), delta); }
bool PrefixStore::check(const std::vector<std::string>& keys) {
  std::vector<std::string> full;
  for (const auto& key : keys) full.push_back(prefixed(key));
  return base_->check(full);
}
Store::Bytes PrefixStore::get_within(const std::string& key, std::chrono::milliseconds timeout) {
  return base_->get_within(prefixed(key), timeout);
}
void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> full;
  for (const auto& key : keys) full.push_back(prefixed(key));
  base_->wait(full, timeout);
}

// ---- FileStore: one file per key, written to a temporary name and renamed so readers never see half a value.

namespace {
[[noreturn]] void throw_file_error(const std::string& what, const std::string& path) {
  throw SystemError("file store: " + what + " '" + path + "': " + std::strerror(errno));
}

bool read_file(const std::string& path, Store::Bytes& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

void write_file_atomically(const std::string& path, const Store::Bytes& value) {
  std::string tmp = path + ".tmp." + std::to_string(getpid()) + "." +
                    std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw_file_error("cannot write", tmp);
    out.write(reinterpret_cast<const char*>(value.data()), static_cast<std::streamsize>(value.size()));
    if (!out) throw_file_error("cannot write", tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw_file_error("cannot rename", tmp);
}
}  // namespace

FileStore::FileStore(const std::string& directory, std::chrono::milliseconds timeout, bool remove_when_done)
    : directory_(directory), remove_when_done_(remove_when_done) {
  timeout_ = timeout;
  if (::mkdir(directory.c_str(), 0700) != 0 && errno != EEXIST) throw_file_error("cannot create", directory);
}

// The directory is flat (path_of escapes '/'). Removed with POSIX calls, not std::filesystem: PyPI's LibTorch
// exports its own static copy of libstdc++'s filesystem functions, which then interpose on ours in a program that
// links both (remove_all jumped to a null pointer at exit in the ALBERT trainer).
FileStore::~FileStore() {
  if (!remove_when_done_) return;
  if (DIR* dir = ::opendir(directory_.c_str())) {
    while (const dirent* entry = ::readdir(dir)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") ::unlink((directory_ + "/" + name).c_str());
    }
    ::closedir(dir);
  }
  ::rmdir(directory_.c_str());  // errors ignored: another rank's leftovers or a vanished directory are harmless
}

std::string FileStore::path_of(const std::string& key) const {
  // Keys may hold '/', which a file name cannot: hex-escape everything but [A-Za-z0-9_.-].
  std::ostringstream name;
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '_' || c == '-' || c == '.') {
      name << c;
    } else {
      static const char* kHex = "0123456789abcdef";
      name << '%' << kHex[c >> 4] << kHex[c & 15];
    }
  }
  return directory_ + "/" + name.str();
}

void FileStore::set(const std::string& key, const Bytes& value) { write_file_atomically(path_of(key), value); }

Store::Bytes FileStore::get(const std::string& key) {
  wait({key}, timeout_);
  Bytes value;
  if (!read_file(path_of(key), value)) throw_file_error("cannot read", path_of(key));
  return value;
}

int64_t FileStore::add(const std::string& key, int64_t delta) {
  std::string lock_path = directory_ + "/.lock";
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) throw_file_error("cannot open", lock_path);
  if (::flock(fd, LOCK_EX) != 0) {
    ::close(fd);
    throw_file_error("cannot lock", lock_path);
  }
  int64_t current = 0;
  try {
    Bytes value;
    if (read_file(path_of(key), value)) current = std::stoll(std::string(value.begin(), value.end()));
    current += delta;
    std::string text = std::to_string(current);
    write_file_atomically(path_of(key), Bytes(text.begin(), text.end()));
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);  // releases the lock
  return current;
}

bool FileStore::check(const std::vector<std::string>& keys) {
  for (const auto& key : keys) {
    if (::access(path_of(key).c_str(), F_OK) != 0) return false;
  }
  return true;
}

std::shared_ptr<Store> open_store(const std::string& url, int rank, std::chrono::milliseconds timeout,
                                  const std::string& job_token) {
  if (url.rfind("tcp://", 0) == 0) {
    std::string rest = url.substr(6);
    auto colon = rest.rfind(':');
    if (colon == std::string::npos) throw InvalidUsageError("store URL '" + url + "' lacks a port (tcp://host:port)");
    std::string host = rest.substr(0, colon);
    if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
    const std::string digits = rest.substr(colon + 1);
    const bool numeric = !digits.empty() && digits.size() <= 5 &&
                         std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; });
    const int port = numeric ? std::stoi(digits) : 0;
    if (port <= 0 || port > 65535) throw InvalidUsageError("store URL '" + url + "' has no valid port (1-65535)");
    return std::make_shared<TcpStore>(host, static_cast<uint16_t>(port), rank == 0, timeout, job_token);
  }
  if (url.rfind("file://", 0) == 0) return std::make_shared<FileStore>(url.substr(7), timeout);
  throw InvalidUsageError("store URL '" + url + "' is neither tcp://host:port nor file:///dir");
}

}  // namespace hiercoll
