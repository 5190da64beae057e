// libfabric transport: one FI_EP_RDM endpoint with tagged messages, one completion queue, an address
// vector indexed by rank (FI_AV_TABLE), and the MR cache for providers that need registered buffers.
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>
#include <sched.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <thread>
#include <unordered_set>

#include "base/log.hpp"
#include "hiercoll/errors.hpp"
#include "transport/mr_cache.hpp"
#include "transport/transport.hpp"

namespace hiercoll::transport {
namespace {

std::string fi_message(const std::string& call, ssize_t rc) {
  return call + " failed: " + fi_strerror(static_cast<int>(-rc)) + " (" + std::to_string(rc) + ")";
}

void check_fi(const char* call, ssize_t rc) {
  if (rc != 0) throw FabricError(fi_message(call, rc));
}

struct FabricRequest;
// The completion context libfabric hands back: the provider owns fi_context2, we find the request behind it.
struct CompletionContext {
  fi_context2 provider_space;
  FabricRequest* request;
};

struct FabricRequest : Request {
  CompletionContext completion{{}, this};
  RequestPtr self;  // keeps the request alive while the provider may still touch `completion`
  MrCache::Lease registration;
  void* context() { return &completion.provider_space; }
  static FabricRequest* from_context(void* context) { return static_cast<CompletionContext*>(context)->request; }
};

class FabricEndpoint final : public Endpoint {
 public:
  explicit FabricEndpoint(const FabricOptions& options) {
    // A constructor that throws runs no destructor: what was opened before the failing step is closed here.
    try {
      open(options);
    } catch (...) {
      close();
      throw;
    }
  }

  ~FabricEndpoint() override {
    cancel_all("endpoint closed");
    close();
  }

  std::string provider() const override { return info_->fabric_attr->prov_name; }
  // RxM (the tcp provider's RDM layer) sends messages up to its bounce-buffer size eagerly, larger ones by
  // segmentation or rendezvous (fi_rxm(7)). That size is FI_OFI_RXM_BUFFER_SIZE, 16 KB by default, which Settings
  // reads for us (FabricOptions); the endpoint's inject size does not report it (64 here).
  size_t eager_bytes() const override {
    return provider().find("ofi_rxm") == std::string::npos ? 0 : rxm_buffer_bytes_;
  }

  std::vector<uint8_t> address() const override {
    std::vector<uint8_t> name(256);
    size_t length = name.size();
    int rc = fi_getname(&ep_->fid, name.data(), &length);
    if (rc == -FI_ETOOSMALL) {
      name.resize(length);
      rc = fi_getname(&ep_->fid, name.data(), &length);
    }
    check_fi("fi_getname", rc);
    name.resize(length);
    return name;
  }

  void connect(int my_rank, const std::vector<std::vector<uint8_t>>& addresses) override {
    my_rank_ = my_rank;
    peers_.resize(addresses.size());
    for (size_t i = 0; i < addresses.size(); ++i) {
      int inserted = fi_av_insert(av_, addresses[i].data(), 1, &peers_[i], 0, nullptr);
      if (inserted != 1) throw FabricError("fi_av_insert of rank " + std::to_string(i) + "'s address failed");
    }
  }

  RequestPtr isend(int peer, Tag tag, const void* buffer, size_t bytes) override {
    auto request = make_request(true, peer, tag, bytes, buffer);
    fi_addr_t address = peers_.at(static_cast<size_t>(peer));
    submit(request, "fi_tsend", [this, request, buffer, bytes, address, tag] {
      return fi_tsend(ep_, buffer, bytes, descriptor(*request), address, tag, request->context());
    });
    return request;
  }

  RequestPtr irecv(int peer, Tag tag, Tag ignore, void* buffer, size_t bytes) override {
    auto request = make_request(false, peer, tag, bytes, buffer);
    // The source rank is part of the tag (see algo/channel.hpp), so receives need no FI_DIRECTED_RECV.
    submit(request, "fi_trecv", [this, request, buffer, bytes, tag, ignore] {
      return fi_trecv(ep_, buffer, bytes, descriptor(*request), FI_ADDR_UNSPEC, tag, ignore, request->context());
    });
    return request;
  }

  void progress(std::chrono::microseconds max_block) override {
    post_backlog();
    if (drain_completions(nullptr) > 0 || max_block.count() <= 0) return;
    if (cq_can_wait_) {
      int timeout_ms = static_cast<int>(std::max<int64_t>(1, max_block.count() / 1000));
      drain_completions(&timeout_ms);
    } else {
      // No wait object: yield, then sleep briefly, so an idle rank leaves the core to others.
      std::this_thread::sleep_for(std::min(max_block, std::chrono::microseconds(50)));
    }
  }

  // fi_cq_signal is libfabric's one call meant for another thread: it ends a blocked fi_cq_sread. Without a wait
  // object progress() never blocks for more than 50 us, so there is nothing to end.
  void wake() override {
    if (cq_can_wait_) fi_cq_signal(cq_);
  }

  void cancel_all(const std::string& reason) override {
    for (auto& pending : backlog_) finish_unposted(pending.request.get(), reason);
    backlog_.clear();
    for (FabricRequest* request : in_flight_) {
      fi_cancel(&ep_->fid, request->context());
    }
    // Give the provider a moment to report the cancellations, then fail whatever is left.
    for (int i = 0; i < 10 && !in_flight_.empty(); ++i) drain_completions(nullptr);
    for (FabricRequest* request : std::unordered_set<FabricRequest*>(in_flight_)) finish(request, false, reason);
  }

 private:
  void open(const FabricOptions& options) {
    info_ = choose_info(options);
    check_fi("fi_fabric", fi_fabric(info_->fabric_attr, &fabric_, nullptr));
    check_fi("fi_domain", fi_domain(fabric_, info_, &domain_, nullptr));

    fi_av_attr av_attr{};
    av_attr.type = FI_AV_TABLE;
    check_fi("fi_av_open", fi_av_open(domain_, &av_attr, &av_, nullptr));

    fi_cq_attr cq_attr{};
    cq_attr.format = FI_CQ_FORMAT_TAGGED;
    cq_attr.size = 4096;
    cq_attr.wait_obj = FI_WAIT_UNSPEC;  // lets progress() sleep in the provider instead of spinning
    if (fi_cq_open(domain_, &cq_attr, &cq_, nullptr) == 0) {
      cq_can_wait_ = true;
    } else {
      cq_attr.wait_obj = FI_WAIT_NONE;
      check_fi("fi_cq_open", fi_cq_open(domain_, &cq_attr, &cq_, nullptr));
    }

    check_fi("fi_endpoint", fi_endpoint(domain_, info_, &ep_, nullptr));
    check_fi("fi_ep_bind(av)", fi_ep_bind(ep_, &av_->fid, 0));
    check_fi("fi_ep_bind(cq)", fi_ep_bind(ep_, &cq_->fid, FI_TRANSMIT | FI_RECV));
    check_fi("fi_enable", fi_enable(ep_));

    needs_mr_ = (info_->domain_attr->mr_mode & FI_MR_LOCAL) != 0 || options.force_mr;
    rxm_buffer_bytes_ = options.rxm_buffer_bytes;
    if (needs_mr_) {
      mr_cache_ = std::make_unique<MrCache>(
          options.mr_cache_entries,
          [this](uintptr_t begin, size_t length) {
            fid_mr* mr = nullptr;
            check_fi("fi_mr_reg", fi_mr_reg(domain_, reinterpret_cast<void*>(begin), length, FI_SEND | FI_RECV, 0, 0, 0,
                                            &mr, nullptr));
            MrCache::Registration reg;
            reg.handle = mr;
            reg.descriptor = fi_mr_desc(mr);
            return reg;
          },
          [](const MrCache::Registration& reg) { fi_close(&static_cast<fid_mr*>(reg.handle)->fid); });
    }
    HIERCOLL_LOG(kInfo, "fabric: provider " << provider() << ", domain " << info_->domain_attr->name << ", cq wait "
                                            << (cq_can_wait_ ? "yes" : "no") << ", mr "
                                            << (needs_mr_ ? "registered (cache)" : "not needed"));
  }

  // Closes whatever is open, children before parents; safe on a partly opened endpoint.
  void close() {
    if (ep_) fi_close(&ep_->fid);
    mr_cache_.reset();  // registrations before the domain
    if (cq_) fi_close(&cq_->fid);
    if (av_) fi_close(&av_->fid);
    if (domain_) fi_close(&domain_->fid);
    if (fabric_) fi_close(&fabric_->fid);
    if (info_) fi_freeinfo(info_);
    ep_ = nullptr;
    cq_ = nullptr;
    av_ = nullptr;
    domain_ = nullptr;
    fabric_ = nullptr;
    info_ = nullptr;
  }
  static fi_info* choose_info(const FabricOptions& options) {
    std::vector<std::string> candidates;
    if (!options.provider.empty()) {
      candidates.push_back(options.provider);
    } else {
      candidates = {"efa", "tcp"};
    }
    std::string tried;
    for (const auto& name : candidates) {
      fi_info* hints = fi_allocinfo();
      hints->caps = FI_TAGGED;
      hints->ep_attr->type = FI_EP_RDM;
      hints->mode = FI_CONTEXT | FI_CONTEXT2;
      hints->domain_attr->threading = FI_THREAD_DOMAIN;
      hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
      hints->tx_attr->msg_order = FI_ORDER_SAS;
      hints->rx_attr->msg_order = FI_ORDER_SAS;
      hints->fabric_attr->prov_name = strdup(name.c_str());
      fi_info* list = nullptr;
      int rc = fi_getinfo(FI_VERSION(1, 11), nullptr, nullptr, 0, hints, &list);
      fi_freeinfo(hints);
      tried += (tried.empty() ? "" : ", ") + name + " (" + (rc ? fi_strerror(-rc) : "ok") + ")";
      if (rc != 0 || list == nullptr) continue;
      fi_info* chosen = pick_interface(list, options.interface);
      if (chosen == nullptr) {
        fi_freeinfo(list);
        tried += " no domain named '" + options.interface + "'";
        continue;
      }
      fi_info* copy = fi_dupinfo(chosen);
      fi_freeinfo(list);
      return copy;
    }
    throw FabricError("no usable libfabric provider for FI_EP_RDM + FI_TAGGED; tried: " + tried +
                      ". Set HIERCOLL_FABRIC_PROVIDER to one of `fi_info -l`.");
  }

  // An explicit interface must match; otherwise prefer a non-loopback one so peers on other hosts
  // (or network namespaces) can reach the published address.
  static fi_info* pick_interface(fi_info* list, const std::string& interface) {
    fi_info* loopback = nullptr;
    for (fi_info* info = list; info != nullptr; info = info->next) {
      std::string domain = info->domain_attr->name ? info->domain_attr->name : "";
      if (!interface.empty()) {
        if (domain == interface) return info;
        continue;
      }
      if (domain == "lo") {
        if (!loopback) loopback = info;
        continue;
      }
      return info;
    }
    return interface.empty() ? loopback : nullptr;
  }

  std::shared_ptr<FabricRequest> make_request(bool is_send, int peer, Tag tag, size_t bytes, const void* buffer) {
    auto request = std::make_shared<FabricRequest>();
    request->is_send = is_send;
    request->peer = peer;
    request->tag = tag;
    request->bytes_posted = bytes;
    if (needs_mr_ && bytes > 0) request->registration = mr_cache_->acquire(buffer, bytes);
    return request;
  }

  void* descriptor(const FabricRequest& request) const {
    return request.registration ? request.registration->descriptor : nullptr;
  }

  // Posts now, or, when the provider's queues are full (FI_EAGAIN, e.g. while it cannot reach a peer),
  // keeps the post in a backlog that progress() retries in order. Never blocks: a request that cannot be
  // posted simply stays pending, and the waiter's deadline decides when to give up.
  void submit(const std::shared_ptr<FabricRequest>& request, const char* call, std::function<ssize_t()> post_fn) {
    if (backlog_.empty()) {
      ssize_t rc = post_fn();
      if (rc == 0) {
        track(request);
        return;
      }
      if (rc != -FI_EAGAIN) {
        throw FabricError(fi_message(call, rc) + " (rank " + std::to_string(my_rank_) + ", peer " +
                          std::to_string(request->peer) + ")");
      }
    }
    backlog_.push_back({request, call, std::move(post_fn)});  // after any earlier one: keeps posting order
  }

  void post_backlog() {
    while (!backlog_.empty()) {
      Pending& next = backlog_.front();
      ssize_t rc = next.post();
      if (rc == -FI_EAGAIN) return;
      if (rc == 0) {
        track(next.request);
      } else {
        finish_unposted(next.request.get(), fi_message(next.call, rc));
      }
      backlog_.pop_front();
    }
  }

  void finish_unposted(FabricRequest* request, const std::string& error) {
    request->registration.reset();
    request->error = error;
    request->state.store(Request::State::kFailed, std::memory_order_release);
  }

  // After a successful post the request is the provider's: keep it alive until its completion.
  void track(const std::shared_ptr<FabricRequest>& request) {
    request->self = request;
    in_flight_.insert(request.get());
  }

  void finish(FabricRequest* request, bool ok, const std::string& error) {
    in_flight_.erase(request);
    request->registration.reset();
    if (!ok) request->error = error;
    request->state.store(ok ? Request::State::kDone : Request::State::kFailed, std::memory_order_release);
    request->self.reset();  // may free the request: touch nothing after this
  }

  // Reads completions; `timeout_ms` non-null: wait for them in the provider's wait object.
  int drain_completions(int* timeout_ms) {
    fi_cq_tagged_entry entries[32];
    int completed = 0;
    for (;;) {
      ssize_t n = timeout_ms ? fi_cq_sread(cq_, entries, 32, nullptr, *timeout_ms) : fi_cq_read(cq_, entries, 32);
      if (n > 0) {
        for (ssize_t i = 0; i < n; ++i) {
          FabricRequest* request = FabricRequest::from_context(entries[i].op_context);
          if (!request->is_send) {
            request->bytes_done = entries[i].len;
            request->tag = entries[i].tag;
          } else {
            request->bytes_done = request->bytes_posted;
          }
          finish(request, true, {});
        }
        completed += static_cast<int>(n);
        timeout_ms = nullptr;
        continue;
      }
      if (n == -FI_EAVAIL) {
        fi_cq_err_entry error{};
        if (fi_cq_readerr(cq_, &error, 0) > 0) {
          FabricRequest* request = FabricRequest::from_context(error.op_context);
          std::string text;
          if (error.err == FI_ETRUNC) {
            // olen is the overflow, where the provider reports it (tcp;ofi_rxm leaves it 0).
            const std::string arrived = error.olen ? std::to_string(request->bytes_posted + error.olen) + " arrived"
                                                   : "a larger message arrived";
            text = "message truncated: the receive was posted for " + std::to_string(request->bytes_posted) +
                   " bytes but " + arrived + " (ranks disagree on the size of this operation)";
          } else if (error.err == FI_ECANCELED) {
            text = "cancelled";
          } else {
            text = std::string(fi_strerror(error.err)) + " (" +
                   fi_cq_strerror(cq_, error.prov_errno, error.err_data, nullptr, 0) + ")";
          }
          finish(request, false, text);
          ++completed;
        }
        timeout_ms = nullptr;
        continue;
      }
      // -FI_ECANCELED: woken by wake() (fi_cq_signal), in libfabric versions that say so instead of -FI_EAGAIN.
      if (n == -FI_EAGAIN || n == -FI_ETIMEDOUT || n == -FI_EINTR || (timeout_ms && n == -FI_ECANCELED))
        return completed;
      throw FabricError(fi_message(timeout_ms ? "fi_cq_sread" : "fi_cq_read", n));
    }
  }

  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_av* av_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_ep* ep_ = nullptr;
  bool cq_can_wait_ = false;
  bool needs_mr_ = false;
  size_t rxm_buffer_bytes_ = 0;
  int my_rank_ = -1;
  std::vector<fi_addr_t> peers_;
  std::unique_ptr<MrCache> mr_cache_;
  std::unordered_set<FabricRequest*> in_flight_;
  struct Pending {
    std::shared_ptr<FabricRequest> request;
    const char* call;
    std::function<ssize_t()> post;
  };
  std::deque<Pending> backlog_;  // posts the provider refused with FI_EAGAIN, in order
};

}  // namespace

std::unique_ptr<Endpoint> open_fabric_endpoint(const FabricOptions& options) {
  return std::make_unique<FabricEndpoint>(options);
}

}  // namespace hiercoll::transport
