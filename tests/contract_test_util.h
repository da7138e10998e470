// Helpers for the tests of the threading contract (threading-contract-test,
// stress-test): a watchdog that turns a hang into a failure, counts of the
// process's threads and descriptors, and a ledger of callback runs.
#pragma once

#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
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

// The descriptors of the kinds a messenger opens (sockets, epoll sets,
// eventfds), each as "fd->target". Pipes and files are the test's own
// (a child server's pipe, the sanitizers' runtimes).
inline std::vector<std::string> MessengerKindFds() {
  std::vector<std::string> out;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    char link[256] = {0};
    std::string path = std::string("/proc/self/fd/") + e->d_name;
    if (readlink(path.c_str(), link, sizeof(link) - 1) <= 0) continue;
    std::string target = link;
    if (target.rfind("socket:", 0) == 0 || target.find("eventpoll") != std::string::npos ||
        target.find("eventfd") != std::string::npos) {
      out.push_back(std::string(e->d_name) + "->" + target);
    }
  }
  closedir(d);
  return out;
}
inline int FdCount() { return static_cast<int>(MessengerKindFds().size()); }

// Waits (bounded) until the process is back to `threads` threads and `fds`
// descriptors: what a messenger shut down on a thread of its own leaves.
inline testing::AssertionResult BackTo(int threads, int fds) {
  for (int i = 0; i < 1000; ++i) {
    if (ThreadCount() <= threads && FdCount() <= fds) return testing::AssertionSuccess();
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::string open;
  for (const std::string& fd : MessengerKindFds()) open += " " + fd;
  return testing::AssertionFailure()
         << ThreadCount() << " threads (want " << threads << "), " << FdCount()
         << " sockets, epoll sets and eventfds (want " << fds << "):" << open;
}

// Waits (bounded) until every thread named `name` (SetCurrentThreadName;
// a reactor's is "osp-reactor-<index>") is blocked in an epoll wait, seen
// in /proc/self/task/TID/syscall: a reactor blocked there has published
// that it sleeps and left its loop lock free. Three readings a millisecond
// apart, so that one caught in a wait it is about to leave does not count.
inline bool IsEpollWait(long nr) {
#ifdef SYS_epoll_wait
  if (nr == SYS_epoll_wait) return true;
#endif
#ifdef SYS_epoll_pwait2
  if (nr == SYS_epoll_pwait2) return true;
#endif
  return nr == SYS_epoll_pwait;
}
// The IDs of this process's threads named `name` (SetCurrentThreadName; a
// reactor's is "osp-reactor-<index>").
inline std::vector<pid_t> ThreadsNamed(const std::string& name) {
  std::vector<pid_t> tids;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return tids;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    char buf[64] = {0};
    FILE* f = std::fopen((std::string("/proc/self/task/") + e->d_name + "/comm").c_str(), "r");
    if (f == nullptr) continue;
    const bool read = std::fgets(buf, sizeof(buf), f) != nullptr;
    std::fclose(f);
    if (read && std::string(buf) == name + "\n") tids.push_back(std::atoi(e->d_name));
  }
  closedir(d);
  return tids;
}

// The system call thread `tid` of this process is blocked in
// (/proc/self/task/TID/syscall); -1 when it runs.
inline long BlockedIn(pid_t tid) {
  long nr = -1;
  FILE* f = std::fopen(("/proc/self/task/" + std::to_string(tid) + "/syscall").c_str(), "r");
  if (f == nullptr) return -1;
  if (std::fscanf(f, "%ld", &nr) != 1) nr = -1;
  std::fclose(f);
  return nr;
}

// Waits (bounded) until every thread named `name` is blocked in an epoll
// wait, seen in /proc/self/task/TID/syscall: a reactor blocked there has
// published that it sleeps and left its loop lock free. Three readings a
// millisecond apart, so that one caught in a wait it is about to leave
// does not count.
inline testing::AssertionResult WaitUntilAsleepInEpoll(const std::string& name,
                                                       std::chrono::seconds limit) {
  auto asleep = [&](size_t* named) {
    const std::vector<pid_t> tids = ThreadsNamed(name);
    *named = tids.size();
    for (pid_t tid : tids) {
      if (!IsEpollWait(BlockedIn(tid))) return false;
    }
    return !tids.empty();
  };
  const auto end = std::chrono::steady_clock::now() + limit;
  int in_a_row = 0;
  size_t named = 0;
  while (std::chrono::steady_clock::now() < end) {
    in_a_row = asleep(&named) ? in_a_row + 1 : 0;
    if (in_a_row == 3) return testing::AssertionSuccess();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return testing::AssertionFailure()
         << named << " threads named " << name << ", not all seen asleep in an epoll wait in "
         << limit.count() << " s";
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
