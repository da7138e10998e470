// The calling thread's name as tools show it (top -H, ps -L, perf, gdb,
// /proc/PID/task/TID/comm): Osprey's threads are named by role, "osp-"
// and what they do ("osp-reactor-0", "osp-worker-3"), so that a profile
// or a stuck process says which thread is which. Any thread, for itself.
#pragma once

#include <string>
#include <string_view>

namespace osprey {

// Linux keeps 15 bytes of a name: longer ones are cut to that.
void SetCurrentThreadName(std::string_view name);

// The calling thread's name, as the kernel keeps it.
std::string CurrentThreadName();

}  // namespace osprey
