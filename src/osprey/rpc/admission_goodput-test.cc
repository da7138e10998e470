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

// What bounds the 1 ms handler's goodput at 1.0 C (docs/performance.md:
// 0.88-0.90 of C, 11-13% refused) is the rule, not the machine: here,
// with nothing but the queue, the defaults refuse 8.6% and deliver 0.914.
// The patience is the 5 ms target (20 ms / 8 is under it), so a newcomer
// finds 5 places (AdmissionTest.TheOneMillisecondCellOfTheOverloadBenchmark);
// with admit_by_patience off the detector, which reads Poisson waits past
// 5 ms as a standing queue, applies the same patience soon after, and only
// 1.3 points come back. 19 places and no overload control refuse 2.6%,
// but the answered calls' p99 is then the deadline, not 0.3 of it. At 4 C
// the defaults answer every admitted call in time; without patience, the
// wait estimate's blind spots (the running call's rest and the call's own
// run) let 2.3% be answered late.
TEST(AdmissionGoodputTest, OneMillisecondHandlerAtCapacity) {
  Cell cell;
  Outcome today = Simulate(Defaults(50), cell);
  printf("1.0 C, defaults:             %s\n", today.Describe().c_str());
  EXPECT_GT(today.refused_share(), 0.07);
  EXPECT_LT(today.refused_share(), 0.10);
  EXPECT_EQ(today.refused_total(), today.refused[static_cast<size_t>(R::kOverloaded)]);
  EXPECT_EQ(0, today.late);
  EXPECT_LT(today.p99_ms(), 20 / 3.0);

  Queue::Options no_patience = Defaults(50);
  no_patience.admit_by_patience = false;
  Outcome before = Simulate(no_patience, cell);
  printf("1.0 C, admit_by_patience=0:  %s\n", before.Describe().c_str());
  EXPECT_GT(before.refused_share(), 0.06);
  EXPECT_LT(before.refused_share(), today.refused_share());

  Queue::Options places = Defaults(19);
  places.overload_control = false;
  Outcome bound19 = Simulate(places, cell);
  printf("1.0 C, 19 places, no control: %s\n", bound19.Describe().c_str());
  EXPECT_LT(bound19.refused_share(), 0.04);
  EXPECT_GT(bound19.p99_ms(), 18.0);

  cell.load = 4;
  Outcome today4 = Simulate(Defaults(50), cell);
  printf("4.0 C, defaults:             %s\n", today4.Describe().c_str());
  EXPECT_EQ(0, today4.late);
  Outcome before4 = Simulate(no_patience, cell);
  printf("4.0 C, admit_by_patience=0:  %s\n", before4.Describe().c_str());
  EXPECT_GT(before4.late, before4.offered / 100);
}

// admit_to_deadline: until the queue is overloaded, every call that can
// still be answered by its deadline is queued (19 places here). At 1.0 C
// 0.955 of C is served (0.914 with the defaults), at 4 C as many as with
// the defaults; but answered calls' p99 is the deadline (19.5 ms against
// 5.9), the detector reads the Poisson waits at 1.0 C as overload now and
// then (3% of calls admitted, then pushed out having waited their
// patience), and the places are only right if the run time is: with the
// worker busy 5% longer per call than the handler's time it learns (the
// benchmark's reading and answering on the same CPU), 1.7% of the calls
// at 1.0 C are answered late and goodput is 0.936.
TEST(AdmissionGoodputTest, AdmissionToTheDeadlineAtCapacity) {
  Queue::Options o = Defaults(50);
  o.admit_to_deadline = true;
  Cell cell;
  Outcome one = Simulate(o, cell);
  printf("1.0 C, admit_to_deadline:        %s\n", one.Describe().c_str());
  EXPECT_GT(one.goodput(), 0.945);  // 0.955 with this seed
  EXPECT_EQ(0, one.late);
  EXPECT_GT(one.p99_ms(), 18.0);
  cell.load = 4;
  Outcome four = Simulate(o, cell);
  printf("4.0 C, admit_to_deadline:        %s\n", four.Describe().c_str());
  EXPECT_GT(four.goodput() * 4, 0.99);
  EXPECT_LT(four.late, four.offered / 1000);
  // The worker's time per call 5% over the handler's, as in the benchmark.
  cell.load = 1;
  cell.service_ns = 1054000;
  Outcome slow = Simulate(o, cell);
  printf("1.0 C, admit_to_deadline, +5%%:   %s\n", slow.Describe().c_str());
  EXPECT_GT(slow.late, slow.offered / 100);
  Outcome slow_defaults = Simulate(Defaults(50), cell);
  printf("1.0 C, defaults, +5%%:            %s\n", slow_defaults.Describe().c_str());
  EXPECT_EQ(0, slow_defaults.late);
}

}  // namespace
}  // namespace osprey
