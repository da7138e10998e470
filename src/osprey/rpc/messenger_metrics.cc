#include "osprey/rpc/messenger_metrics.h"

namespace osprey {

MessengerMetrics::MessengerMetrics(bool counting, bool track_slow_calls,
                                   MonoDelta slow_call_threshold, int num_reactors,
                                   std::shared_ptr<std::atomic<int64_t>> open_inbound) {
  if (counting) {
    transport_ = std::make_shared<transport::TransportMetrics>(&registry_, num_reactors,
                                                               std::move(open_inbound));
  }
  if (counting || track_slow_calls)
    slow_calls_ = std::make_unique<SlowCallLog>(slow_call_threshold);
}

ServerMethodMetrics* MessengerMetrics::ServerMethod(const std::string& method) {
  if (!counting()) return nullptr;
  MutexLock l(mu_);
  auto& slot = server_[method];
  if (slot == nullptr) slot = std::make_unique<ServerMethodMetrics>(&registry_, method);
  return slot.get();
}

ClientMethodMetrics* MessengerMetrics::ClientMethod(const std::string& method) {
  if (!counting()) return nullptr;
  MutexLock l(mu_);
  auto& slot = client_[method];
  if (slot == nullptr) slot = std::make_unique<ClientMethodMetrics>(&registry_, method);
  return slot.get();
}

}  // namespace osprey
