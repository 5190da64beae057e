#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hiercoll/export.hpp"

namespace hiercoll {

/// Key-value rendezvous shared by all ranks (the shape of torch.distributed's Store).
/// Every call is blocking and thread-safe; calls that wait give up after timeout() with TimeoutError.
class HIERCOLL_API Store {
 public:
  using Bytes = std::vector<uint8_t>;
  virtual ~Store() = default;

  virtual void set(const std::string& key, const Bytes& value) = 0;
  /// Waits until `key` exists, then returns its value.
  virtual Bytes get(const std::string& key) = 0;
  /// Atomically adds `delta` to the integer stored at `key` (0 if absent) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  /// True if every key exists, without waiting.
  virtual bool check(const std::vector<std::string>& keys) = 0;
  /// Waits until every key exists. The TimeoutError names the keys still missing.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  /// Waits at most `timeout` for `key`, then returns its value; TimeoutError if it did not appear. By default
  /// wait() then get(); a store whose server can hold a read until the key appears does it in one request.
  virtual Bytes get_within(const std::string& key, std::chrono::milliseconds timeout);
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }

  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

  void set(const std::string& key, const std::string& value) { set(key, Bytes(value.begin(), value.end())); }
  std::string get_string(const std::string& key);

 protected:
  std::chrono::milliseconds timeout_{std::chrono::minutes(5)};
};

/// A store served over TCP by one process (usually rank 0); the others connect as clients.
class HIERCOLL_API TcpStore : public Store {
 public:
  /// `is_server`: listen on host:port (port 0 picks a free one, see port()); otherwise connect,
  /// retrying until `timeout` while the server comes up. A non-empty `job_token` (HIERCOLL_JOB_TOKEN, which
  /// hiercoll_launch sets) is a secret of the job: a server with one drops every client that does not present it
  /// first (stray clients, another job's ranks), and a client with one presents it on connecting.
  TcpStore(const std::string& host, uint16_t port, bool is_server,
           std::chrono::milliseconds timeout = std::chrono::minutes(5), const std::string& job_token = {});
  ~TcpStore() override;
  uint16_t port() const;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  Bytes get_within(const std::string& key, std::chrono::milliseconds timeout) override;
  /// The requests this process's server has answered (0 where it serves none): start-up's cost at rank 0.
  uint64_t requests_served() const;
  using Store::set;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// A store in a directory of a shared file system: one file per key, locks for add().
class HIERCOLL_API FileStore : public Store {
 public:
  /// `remove_when_done`: this instance deletes the directory when destroyed (give it to exactly one rank,
  /// and only for a directory made for this job).
  explicit FileStore(const std::string& directory, std::chrono::milliseconds timeout = std::chrono::minutes(5),
                     bool remove_when_done = false);
  ~FileStore() override;
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  using Store::set;

 private:
  std::string path_of(const std::string& key) const;
  std::string directory_;
  bool remove_when_done_;
};

/// Namespaces every key of an underlying store with `prefix/`.
class HIERCOLL_API PrefixStore : public Store {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> base);
  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  Bytes get_within(const std::string& key, std::chrono::milliseconds timeout) override;
  /// The store this one prefixes.
  const std::shared_ptr<Store>& base() const { return base_; }
  using Store::set;
  using Store::wait;

 private:
  std::string prefixed(const std::string& key) const { return prefix_ + "/" + key; }
  std::string prefix_;
  std::shared_ptr<Store> base_;
};

/// Opens a store from a URL: "tcp://host:port" (rank 0 serves it) or "file:///path/to/dir". A TCP store's
/// clients present `job_token` and its server accepts only those that do (TcpStore; rendezvous_from_env passes
/// HIERCOLL_JOB_TOKEN).
HIERCOLL_API std::shared_ptr<Store> open_store(const std::string& url, int rank,
                                               std::chrono::milliseconds timeout = std::chrono::minutes(5),
                                               const std::string& job_token = {});

/// Where this process stands in a job, read from whatever launched it.
struct Rendezvous {
  int rank = 0;
  int size = 1;
  std::shared_ptr<Store> store;  ///< shared by every rank of the job
};

/// Rank and size from HIERCOLL_RANK/HIERCOLL_WORLD_SIZE, torchrun's RANK/WORLD_SIZE, Open MPI's
/// OMPI_COMM_WORLD_RANK/SIZE, PMIx's PMIX_RANK or Slurm's SLURM_PROCID/SLURM_NTASKS. The store, first that applies:
///   HIERCOLL_STORE (tcp://host:port or file:///dir); MASTER_ADDR and MASTER_PORT;
///   under a PMIx launcher (mpirun, srun --mpi=pmix): rank 0 serves a TCP store on its reachable address
///   (launch::reachable_address) and publishes it through PMIx, so no address is set by hand across hosts;
///   under Slurm without PMIx: the first node of SLURM_JOB_NODELIST, port MASTER_PORT or 20000 + job id % 20000;
///   under mpirun without PMIx: a file store in /tmp named after the job (one host only).
/// Throws InvalidUsageError naming what is missing, TimeoutError if the job's ranks do not meet in `timeout`.
HIERCOLL_API Rendezvous rendezvous_from_env(std::chrono::milliseconds timeout = std::chrono::minutes(5));

/// "host:port" that every process of a launcher's job agrees on, for a rendezvous server rank 0 will run (torch's
/// TCPStore in hiercoll_torch): under PMIx rank 0 picks its reachable address and a free port and publishes them;
/// under Slurm, the first node and the port above. nullopt when launched by neither. Every rank must call it.
HIERCOLL_API std::optional<std::string> launcher_rendezvous_address(int rank,
                                                                    std::chrono::milliseconds timeout = std::chrono::minutes(5));

/// The torch.distributed variables a process started by mpirun or srun lacks, from its launcher's environment:
/// RANK, WORLD_SIZE, LOCAL_RANK from Open MPI's OMPI_COMM_WORLD_* or Slurm's SLURM_PROCID/NTASKS/LOCALID; without
/// MASTER_ADDR, launcher_rendezvous_address's (or 127.0.0.1 under mpirun on one node); MASTER_PORT 29500 unless
/// set. Variables already set are never returned, so what a user set wins. Every rank must call it (it may
/// rendezvous through PMIx). hiercoll_torch.init_process_group sets these before torch's.
HIERCOLL_API std::map<std::string, std::string> torch_env_from_launcher(
    std::chrono::milliseconds timeout = std::chrono::minutes(10));

}  // namespace hiercoll
