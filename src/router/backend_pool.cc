#include "router/backend_pool.h"

#include <algorithm>

#include "core/status.h"

namespace pagoda::router {

Lease::~Lease() { pool_->release(decision_.backend); }

BackendPool::BackendPool(std::vector<std::string> urls, PrefixPolicyOptions policy)
    : urls_(std::move(urls)), policy_(urls_.size(), policy) {
  if (urls_.empty()) throw InvalidArgument("the router needs at least one --backend");
  for (std::string& url : urls_) {
    while (url.size() > 1 && url.back() == '/') url.pop_back();
    if (std::count(urls_.begin(), urls_.end(), url) > 1) {
      throw InvalidArgument(fmt::format("--backend {} is given twice", url));
    }
    try {
      endpoints_.push_back(client::parse_base_url(url));
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(fmt::format("--backend: {}", e.what()));
    }
  }
  healthy_.assign(urls_.size(), false);
  in_flight_.assign(urls_.size(), 0);
}

std::unique_ptr<Lease> BackendPool::assign(const std::vector<uint64_t>& hashes,
                                           const std::vector<bool>& tried) {
  std::lock_guard lock(mutex_);
  std::vector<BackendState> states(urls_.size());
  for (size_t b = 0; b < urls_.size(); ++b) {
    states[b].eligible = healthy_[b] && !(b < tried.size() && tried[b]);
    states[b].in_flight = in_flight_[b];
  }
  RouteDecision decision;
  if (!policy_.choose(hashes, states, decision)) return nullptr;
  ++in_flight_[decision.backend];
  return std::make_unique<Lease>(this, decision);
}

void BackendPool::release(size_t b) {
  std::lock_guard lock(mutex_);
  --in_flight_[b];
}

bool BackendPool::set_healthy(size_t b, bool healthy) {
  std::lock_guard lock(mutex_);
  const bool before = healthy_[b];
  healthy_[b] = healthy;
  return before;
}

bool BackendPool::any_healthy() const {
  std::lock_guard lock(mutex_);
  return std::find(healthy_.begin(), healthy_.end(), true) != healthy_.end();
}

PoolSnapshot BackendPool::snapshot() const {
  std::lock_guard lock(mutex_);
  return {healthy_, in_flight_};
}

}  // namespace pagoda::router
