#include "transport/deferred_endpoint.hpp"

namespace hiercoll::transport {

void DeferredEndpoint::start() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (started_) return;
  started_ = true;
  thread_ = std::thread([this] {
    std::unique_ptr<Endpoint> endpoint;
    std::exception_ptr error;
    try {
      endpoint = open_();
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> done(mutex_);
    endpoint_ = std::move(endpoint);
    error_ = error;
    done_ = true;
    if (endpoint_) ready_.store(endpoint_.get(), std::memory_order_release);
    done_cv_.notify_all();
  });
}

Endpoint& DeferredEndpoint::wait() {
  start();
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
  return *endpoint_;
}

void DeferredEndpoint::join() {
  std::thread opener;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    opener = std::move(thread_);
  }
  if (opener.joinable()) opener.join();
}

std::shared_ptr<const void> DeferredEndpoint::pin(const void* buffer, size_t bytes) {
  // Not open yet: the buffer goes unregistered, and where the provider needs registration each request registers its
  // own piece for as long as it runs, as for any buffer nobody pinned.
  Endpoint* endpoint = ready();
  return endpoint ? endpoint->pin(buffer, bytes) : nullptr;
}

void DeferredEndpoint::wake() {
  if (Endpoint* endpoint = ready()) endpoint->wake();
}

void DeferredEndpoint::cancel_all(const std::string& reason) {
  if (Endpoint* endpoint = ready()) endpoint->cancel_all(reason);
}

void DeferredEndpoint::quiesce(std::chrono::milliseconds limit) {
  if (Endpoint* endpoint = ready()) endpoint->quiesce(limit);
}

}  // namespace hiercoll::transport
