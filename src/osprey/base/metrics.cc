#include "osprey/base/metrics.h"

#include <algorithm>
#include <bit>
#include <climits>

namespace osprey {

namespace {

// Bit i set: a live thread owns shard i.
std::atomic<uint32_t> owned_shards{0};
// Unsigned: it is bumped at every thread exit and must wrap, not overflow.
std::atomic<uint32_t> next_shared_shard{0};
}  // namespace

constinit thread_local int MetricShards::this_thread_shard = -1;

int MetricShards::NextSharedShard() {
  return SharedShard(next_shared_shard.fetch_add(1, std::memory_order_relaxed));
}

// Gives a thread's owned shard back when the thread exits. The release
// pairs with the next owner's acquire, so that it adds to the values this
// thread left. Updates from later thread_local destructors go to a shared
// shard.
struct MetricShards::OwnedShardReturn {
  int shard;
  ~OwnedShardReturn() {
    this_thread_shard = NextSharedShard();
    owned_shards.fetch_and(~(uint32_t{1} << shard), std::memory_order_release);
  }
};

int MetricShards::AssignThisThreadShard() {
  uint32_t taken = owned_shards.load(std::memory_order_relaxed);
  while (true) {
    int free = std::countr_one(taken);
    if (free >= kOwnedShards) break;
    if (owned_shards.compare_exchange_weak(taken, taken | (uint32_t{1} << free),
                                           std::memory_order_acquire, std::memory_order_relaxed)) {
      thread_local OwnedShardReturn give_back{free};
      this_thread_shard = give_back.shard;
      return this_thread_shard;
    }
  }
  this_thread_shard = NextSharedShard();
  return this_thread_shard;
}

int MetricShards::OwnedShardsInUse() {
  return std::popcount(owned_shards.load(std::memory_order_acquire));
}

int64_t Counter::value() const {
  int64_t sum = 0;
  for (const Shard& s : shards_) sum += s.value.load(std::memory_order_relaxed);
  return sum;
}

LatencyHistogram::Reading LatencyHistogram::Read() const {
  Reading r;
  std::array<int64_t, kBuckets + 1> per_bucket{};
  for (const Shard& s : shards_) {
    for (int b = 0; b <= kBuckets; ++b)
      per_bucket[b] += s.buckets[b].load(std::memory_order_relaxed);
    r.sum_micros += s.sum_micros.load(std::memory_order_relaxed);
  }
  int64_t running = 0;
  for (int b = 0; b < kBuckets; ++b) {
    running += per_bucket[b];
    r.cumulative[b] = running;
  }
  r.count = running + per_bucket[kBuckets];
  return r;
}

bool IsValidMetricName(const std::string& name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

Status MetricRegistry::FamilyFor(const std::string& name, const std::string& help,
                                 MetricValue::Type type, const MetricLabels& labels, Family** out) {
  *out = nullptr;
  if (!IsValidMetricName(name))
    return Status::InvalidArgument("invalid metric name '" + name + "'");
  for (const auto& [label, value] : labels) {
    // Names starting with "__" are Prometheus' own; "le" is the histogram's.
    if (!IsValidMetricName(label) || label.find(':') != std::string::npos ||
        label.rfind("__", 0) == 0 || (type == MetricValue::Type::kHistogram && label == "le")) {
      return Status::InvalidArgument("invalid label name '" + label + "' on metric " + name);
    }
  }
  auto [it, inserted] = families_.try_emplace(name);
  if (inserted) {
    it->second.type = type;
    it->second.help = help;
  } else if (it->second.type != type) {
    return Status::InvalidArgument("metric " + name + " is already registered as another type");
  }
  *out = &it->second;
  return Status::OK();
}

Status MetricRegistry::GetCounter(const std::string& name, const std::string& help,
                                  MetricLabels labels, Counter** out) {
  MutexLock l(mu_);
  Family* f;
  *out = nullptr;
  OSPREY_RETURN_NOT_OK(FamilyFor(name, help, MetricValue::Type::kCounter, labels, &f));
  auto& slot = f->counters[std::move(labels)];
  if (slot == nullptr) slot = std::make_unique<Counter>();
  *out = slot.get();
  return Status::OK();
}

Status MetricRegistry::GetHistogram(const std::string& name, const std::string& help,
                                    MetricLabels labels, LatencyHistogram** out) {
  MutexLock l(mu_);
  Family* f;
  *out = nullptr;
  OSPREY_RETURN_NOT_OK(FamilyFor(name, help, MetricValue::Type::kHistogram, labels, &f));
  auto& slot = f->histograms[std::move(labels)];
  if (slot == nullptr) slot = std::make_unique<LatencyHistogram>();
  *out = slot.get();
  return Status::OK();
}

Status MetricRegistry::AddGauge(const std::string& name, const std::string& help,
                                MetricLabels labels, std::function<double()> read) {
  MutexLock l(mu_);
  Family* f;
  OSPREY_RETURN_NOT_OK(FamilyFor(name, help, MetricValue::Type::kGauge, labels, &f));
  f->functions[std::move(labels)] = std::move(read);
  return Status::OK();
}

Status MetricRegistry::AddCounterFunction(const std::string& name, const std::string& help,
                                          MetricLabels labels, std::function<double()> read) {
  MutexLock l(mu_);
  Family* f;
  OSPREY_RETURN_NOT_OK(FamilyFor(name, help, MetricValue::Type::kCounter, labels, &f));
  f->functions[std::move(labels)] = std::move(read);
  return Status::OK();
}

std::vector<MetricValue> MetricRegistry::Snapshot() const {
  std::vector<MetricValue> out;
  std::vector<std::pair<size_t, std::function<double()>>> gauges;
  {
    MutexLock l(mu_);
    for (const auto& [name, f] : families_) {
      auto add = [&, &name = name, &f = f](const MetricLabels& labels) -> MetricValue& {
        MetricValue& v = out.emplace_back();
        v.name = name;
        v.help = f.help;
        v.type = f.type;
        v.labels = labels;
        return v;
      };
      for (const auto& [labels, c] : f.counters)
        add(labels).value = static_cast<double>(c->value());
      for (const auto& [labels, h] : f.histograms) add(labels).histogram = h->Read();
      for (const auto& [labels, read] : f.functions) {
        add(labels);
        gauges.emplace_back(out.size() - 1, read);
      }
    }
  }
  // Read outside the lock: a gauge may look at state that has locks of its own.
  for (auto& [i, read] : gauges) out[i].value = read();
  return out;
}

}  // namespace osprey
