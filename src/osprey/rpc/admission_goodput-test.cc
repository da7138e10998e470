// The overload benchmark's 1 ms cell at 1.0 C, simulated through the real
// ServiceQueue on a clock of the test's: Poisson arrivals, one worker, a
// handler of 1 ms, 20 ms deadlines. One thread plays the reactor and the
// worker in turn, so the queue's answers are exactly the rule's, with no
// CPU sharing, no batching and no timer stalls: what is left of the
// benchmark's refusals here is the rule's doing. Issue 48, item 4.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "osprey/rpc/service_queue.h"

namespace osprey {
namespace {

struct SimCall {
  SimCall(MonoTime received, MonoTime deadline) : received(received), due(deadline) {}
  MonoTime received_at() const { return received; }
  MonoTime deadline() const { return due; }
  MonoTime received;
  MonoTime due;
};
using Queue = ServiceQueue<SimCall>;
using R = Queue::PutResult;

struct Cell {
  double load = 1.0;             // offered, as a share of 1 / service
  int64_t run_ns = 1000000;      // the handler's time, as the worker reports it
  int64_t service_ns = 1000000;  // the worker's time per call (handler and the rest)
  int64_t deadline_ms = 20;
  int calls = 200000;
  uint32_t seed = 1;
};

struct Outcome {
  double load = 1;
  int offered = 0;
  int on_time = 0;                   // answered by its deadline
  int late = 0;                      // answered after it
  std::array<int, 8> refused{};      // by PutResult (kQueued: none)
  std::vector<int64_t> answered_us;  // each answered call's time from arrival
  double p99_ms() {
    if (answered_us.empty()) return 0;
    std::sort(answered_us.begin(), answered_us.end());
    return answered_us[answered_us.size() * 99 / 100] / 1000.0;
  }
  double goodput() const { return static_cast<double>(on_time) / offered; }
  int refused_total() const {
    int n = 0;
    for (int r : refused) n += r;
    return n;
  }
  double refused_share() const { return static_cast<double>(refused_total()) / offered; }
  std::string Describe() {
    char buf[320];
    snprintf(buf, sizeof(buf),
             "goodput %.3f, refused %.1f%% (full %d, overloaded %d, would miss %d, evicted %d, "
             "waited too long %d, expired %d), late %d, p99 %.1f ms",
             goodput() * load, 100 * refused_share(), refused[1], refused[2], refused[3],
             refused[5], refused[6], refused[7], late, p99_ms());
    return buf;
  }
};

Outcome Simulate(Queue::Options o, const Cell& cell) {
  MonoTime now = MonoTime() + MonoDelta::FromSeconds(1000);
  o.clock = [&now] { return now; };
  Queue q(o);
  std::mt19937_64 random(cell.seed);
  std::exponential_distribution<double> gap(cell.load / static_cast<double>(cell.service_ns));
  auto next_gap = [&] { return MonoDelta::FromNanoseconds(static_cast<int64_t>(gap(random))); };
  Outcome out;
  out.load = cell.load;
  MonoTime next_arrival = now + next_gap();
  std::unique_ptr<SimCall> running;
  MonoTime busy_until;
  int64_t last_run = -1;
  auto count = [&](const Queue::RefusedList& list) {
    for (const auto& r : list) out.refused[static_cast<size_t>(r.why)]++;
  };
  // The worker, idle at `now`, takes the next call if there is one.
  auto take = [&] {
    while (q.size() > 0) {
      Queue::RefusedList shed;
      EXPECT_TRUE(q.Take(&running, last_run, false, &shed));
      count(shed);
      last_run = -1;
      if (running != nullptr) {
        busy_until = now + MonoDelta::FromNanoseconds(cell.service_ns);
        return;
      }
    }
  };
  while (out.offered < cell.calls) {
    if (running != nullptr && busy_until <= next_arrival) {
      now = busy_until;
      (now <= running->due ? out.on_time : out.late)++;
      out.answered_us.push_back((now - running->received).ToMicroseconds());
      running.reset();
      last_run = cell.run_ns;
      take();
      continue;
    }
    now = next_arrival;
    next_arrival = now + next_gap();
    out.offered++;
    auto c = std::make_unique<SimCall>(now, now + MonoDelta::FromMilliseconds(cell.deadline_ms));
    Queue::RefusedList pushed_out;
    R r = q.Put(&c, &pushed_out);
    if (r != R::kQueued) out.refused[static_cast<size_t>(r)]++;
    count(pushed_out);
    if (running == nullptr) take();
  }
  return out;
}

Queue::Options Defaults(size_t capacity) {
  Queue::Options o;  // ServicePoolOptions' defaults
  o.capacity = capacity;
  o.workers = 1;
  return o;
}

// What bounded the 1 ms handler's goodput at 1.0 C (0.88-0.90 of C, 11-13%
// refused, docs/performance.md before issue 48) was the rule, not the
// machine: here, with nothing but the queue, admission by patience (the
// defaults until then, admit_to_deadline off) refuses 7-10%. The patience
// is the 5 ms target (20 ms / 8 is under it), so a newcomer finds 5 places
// (AdmissionTest.TheOneMillisecondCellOfTheOverloadBenchmark); with
// admit_by_patience off too the detector, which reads Poisson waits past
// 5 ms as a standing queue, applies the same patience soon after, and only
// a point or so comes back. The defaults now admit every call that can
// still be answered by its deadline (19 places) until the queue is
// overloaded or outpaced: 0.97 of C at 1.0 C (0.914 by patience), as 19
// places and no overload control do, none late; the price is the answered
// calls' p99, near the deadline (19.8 ms) rather than 0.3 of it. At 4 C
// the defaults answer every admitted call in time with a p99 of 6 ms: the
// queue is outpaced at once and applies the patience. Without either
// (admit_by_patience and admit_to_deadline off), the old wait estimate's
// blind spots (the running call's rest and the call's own run) let 2.3%
// be answered late.
TEST(AdmissionGoodputTest, OneMillisecondHandlerAtCapacity) {
  Cell cell;
  Outcome today = Simulate(Defaults(50), cell);
  printf("1.0 C, defaults:                    %s\n", today.Describe().c_str());
  EXPECT_GT(today.goodput(), 0.95);  // 0.971 with this seed
  EXPECT_LT(today.refused_share(), 0.04);
  EXPECT_EQ(0, today.late);
  EXPECT_GT(today.p99_ms(), 15.0);

  Queue::Options patience = Defaults(50);
  patience.admit_to_deadline = false;
  Outcome by_patience = Simulate(patience, cell);
  printf("1.0 C, admit_to_deadline=0:         %s\n", by_patience.Describe().c_str());
  EXPECT_GT(by_patience.refused_share(), 0.07);
  EXPECT_LT(by_patience.refused_share(), 0.10);
  EXPECT_EQ(by_patience.refused_total(), by_patience.refused[static_cast<size_t>(R::kOverloaded)]);
  EXPECT_EQ(0, by_patience.late);
  EXPECT_LT(by_patience.p99_ms(), 20 / 3.0);

  Queue::Options no_patience = patience;
  no_patience.admit_by_patience = false;
  Outcome before = Simulate(no_patience, cell);
  printf("1.0 C, both off:                    %s\n", before.Describe().c_str());
  EXPECT_GT(before.refused_share(), 0.06);
  EXPECT_LT(before.refused_share(), by_patience.refused_share());

  Queue::Options places = Defaults(19);
  places.overload_control = false;
  Outcome bound19 = Simulate(places, cell);
  printf("1.0 C, 19 places, no control:       %s\n", bound19.Describe().c_str());
  EXPECT_LT(bound19.refused_share(), 0.04);
  EXPECT_GT(bound19.p99_ms(), 18.0);
  EXPECT_NEAR(bound19.goodput(), today.goodput(), 0.01);

  cell.load = 4;
  Outcome today4 = Simulate(Defaults(50), cell);
  printf("4.0 C, defaults:                    %s\n", today4.Describe().c_str());
  EXPECT_EQ(0, today4.late);
  EXPECT_GT(today4.goodput() * 4, 0.99);
  EXPECT_LT(today4.p99_ms(), 20 / 3.0);
  for (double load : {1.5, 2.0}) {
    cell.load = load;
    Outcome o = Simulate(Defaults(50), cell);
    printf("%.1f C, defaults:                    %s\n", load, o.Describe().c_str());
    EXPECT_LT(o.late, o.offered / 1000);
    EXPECT_GT(o.goodput() * load, 0.99);
  }
  cell.load = 4;
  Outcome patience4 = Simulate(patience, cell);
  printf("4.0 C, admit_to_deadline=0:         %s\n", patience4.Describe().c_str());
  EXPECT_EQ(0, patience4.late);
  Outcome before4 = Simulate(no_patience, cell);
  printf("4.0 C, both off:                    %s\n", before4.Describe().c_str());
  EXPECT_GT(before4.late, before4.offered / 100);
}

// The queue's wait estimate counts the worker's time per call, as it sees
// it between takes, not only the handler's run time that the worker
// reports: with the worker busy 5% or 20% longer per call than the handler
// (the benchmark's reading and answering on the same CPU), admission to the
// deadline answered 1.7% of the calls late at 5% when it counted run time
// alone (4a5dca8: 0.936 of C). Now none is late, and goodput stays over
// 0.95 of the worker's rate.
TEST(AdmissionGoodputTest, AdmissionToTheDeadlineCountsTheWorkersTimePerCall) {
  Cell cell;
  for (int64_t service_ns : {1054000, 1200000}) {
    cell.service_ns = service_ns;
    Outcome o = Simulate(Defaults(50), cell);
    printf("1.0 C, defaults, worker %.2f ms:    %s\n", service_ns / 1e6, o.Describe().c_str());
    EXPECT_EQ(0, o.late) << service_ns;
    EXPECT_GT(o.goodput(), 0.95) << service_ns;
  }
}

}  // namespace
}  // namespace osprey
