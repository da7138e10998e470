// A test_server process (test_server.cc) for tests that kill a server:
// spawned, asked for its address, and killed (SIGKILL) and reaped by its
// PID, whatever happened. Tests that use it define OSPREY_TEST_SERVER.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "osprey/base/monotime.h"
#include "osprey/base/sockaddr.h"
#include "osprey/base/status.h"

extern char** environ;

namespace osprey::rpc_test {

// The test_server executable in a child process; killed (SIGKILL) and
// reaped when this goes out of scope, whatever happened.
class ChildServer {
 public:
  ChildServer() = default;
  ChildServer(const ChildServer&) = delete;
  ChildServer& operator=(const ChildServer&) = delete;
  ~ChildServer() { Kill(); }

  // Starts it on `port` (0: any) and waits for its "listening on" line.
  Status Spawn(uint16_t port, Sockaddr* addr) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return Status::IOError("pipe2", errno);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    std::string path = OSPREY_TEST_SERVER;
    std::string port_arg = std::to_string(port);
    char* argv[] = {path.data(), port_arg.data(), nullptr};
    int rc = posix_spawn(&pid_, path.c_str(), &actions, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    if (rc != 0) {
      pid_ = -1;
      close(fds[0]);
      return Status::IOError("posix_spawn " + path, rc);
    }
    std::string line;
    MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(30);
    while (line.find('\n') == std::string::npos) {
      int ms = static_cast<int>((deadline - MonoTime::Now()).ToMilliseconds());
      if (ms <= 0) break;
      pollfd p{fds[0], POLLIN, 0};
      if (poll(&p, 1, ms) <= 0) continue;
      char buf[256];
      ssize_t n = read(fds[0], buf, sizeof(buf));
      if (n <= 0) break;
      line.append(buf, static_cast<size_t>(n));
    }
    close(fds[0]);
    size_t colon = line.rfind(':');
    if (line.rfind("listening on ", 0) != 0 || colon == std::string::npos) {
      return Status::IllegalState("test_server did not report its address: '" + line + "'");
    }
    *addr = Sockaddr::Loopback(static_cast<uint16_t>(std::stoi(line.substr(colon + 1))));
    return Status::OK();
  }

  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int status;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
};

}  // namespace osprey::rpc_test
