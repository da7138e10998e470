// Helpers for the tests of the threading contract (threading-contract-test,
// stress-test): a watchdog that turns a hang into a failure, counts of the
// process's threads and descriptors, and a ledger of callback runs.
#pragma once

#include <dirent.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "osprey/transport/reactor.h"

namespace osprey::rpc_test {

// Fails the test (and ends the process, so CTest reports it) if the scope
// is still running after `limit`: a hang is a failure, not a timeout.
class Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds limit) {
    thread_ = std::thread([this, limit] {
      std::unique_lock<std::mutex> l(mu_);
      if (!cv_.wait_for(l, limit, [this] { return done_; })) {
        ADD_FAILURE() << "watchdog: still running after " << limit.count() << " s (a hang)";
        std::fflush(stdout);
        std::_Exit(3);
      }
    });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> l(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

inline int CountEntries(const char* dir) {
  DIR* d = opendir(dir);
  if (d == nullptr) return -1;
  int n = 0;
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n;
}
inline int ThreadCount() { return CountEntries("/proc/self/task"); }
inline int FdCount() { return CountEntries("/proc/self/fd"); }

// Waits (bounded) until the process is back to `threads` threads and `fds`
// descriptors: what a messenger shut down on a thread of its own leaves.
inline testing::AssertionResult BackTo(int threads, int fds) {
  for (int i = 0; i < 1000; ++i) {
    if (ThreadCount() <= threads && FdCount() <= fds) return testing::AssertionSuccess();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return testing::AssertionFailure() << ThreadCount() << " threads (want " << threads << "), "
                                     << FdCount() << " descriptors (want " << fds << ")";
}

// Counts each callback's runs, and which ran off a reactor thread.
struct CallbackLedger {
  explicit CallbackLedger(int n) : runs(n) {
    for (auto& r : runs) r.store(0);
  }
  void Ran(int i) {
    runs[i].fetch_add(1);
    if (!transport::Reactor::OnAnyReactorThread()) off_reactor.fetch_add(1);
  }
  testing::AssertionResult EachExactlyOnce() const {
    for (size_t i = 0; i < runs.size(); ++i) {
      if (runs[i].load() != 1) {
        return testing::AssertionFailure()
               << "callback " << i << " ran " << runs[i].load() << " times";
      }
    }
    return testing::AssertionSuccess();
  }
  std::vector<std::atomic<int>> runs;
  std::atomic<int> off_reactor{0};
};

}  // namespace osprey::rpc_test
