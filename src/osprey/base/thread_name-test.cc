#include "osprey/base/thread_name.h"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

namespace osprey {
namespace {

TEST(ThreadNameTest, ANameIsWhatTheKernelShowsAndALongOneIsCutToFifteenBytes) {
  std::string seen, comm;
  std::thread t([&] {
    SetCurrentThreadName("osp-worker-12");
    std::ifstream f("/proc/self/task/" + std::to_string(::syscall(SYS_gettid)) + "/comm");
    std::getline(f, comm);
    SetCurrentThreadName("osp-a-name-longer-than-fifteen");
    seen = CurrentThreadName();
  });
  t.join();
  EXPECT_EQ("osp-worker-12", comm);
  EXPECT_EQ("osp-a-name-long", seen);
}

}  // namespace
}  // namespace osprey
