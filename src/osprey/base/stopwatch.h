// Stopwatch: measures wall time, user and system CPU time and context
// switches over one or more start/stop intervals, for the whole process
// (RUSAGE_SELF) or for the thread that uses it (RUSAGE_THREAD). A thread-mode
// Stopwatch must be started, stopped and read on one thread.
#pragma once

#include <cstdint>

#include "osprey/base/monotime.h"

namespace osprey {

struct CpuTimes {
  MonoDelta wall;
  MonoDelta user;
  MonoDelta system;
  int64_t context_switches = 0;  // voluntary + involuntary
};

class Stopwatch {
 public:
  enum class Scope { kProcess, kThread };

  explicit Stopwatch(Scope scope = Scope::kProcess) : scope_(scope) {}

  // Clears what was measured and starts a new interval.
  void Start();
  // Ends the current interval; its times are added to the total.
  void Stop();
  // Starts another interval without clearing the total.
  void Resume();
  bool running() const { return running_; }

  // The total so far, including the running interval if any.
  CpuTimes Elapsed() const;

 private:
  CpuTimes Sample() const;

  Scope scope_;
  bool running_ = false;
  CpuTimes start_;
  CpuTimes total_;
};

}  // namespace osprey
