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
#include <vector>

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
  Status Spawn(uint16_t port, Sockaddr* addr) { return Spawn(std::to_string(port), {}, addr); }

  // Starts it listening on `listen` (a port or an address), run through
  // `wrapper` (such as {"ip", "netns", "exec", NS}, which execs it: the PID
  // stays the server's).
  Status Spawn(const std::string& listen, const std::vector<std::string>& wrapper, Sockaddr* addr,
               const std::vector<std::string>& flags = {}) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return Status::IOError("pipe2", errno);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    std::vector<std::string> args = wrapper;
    args.push_back(OSPREY_TEST_SERVER);
    args.push_back(listen);
    args.insert(args.end(), flags.begin(), flags.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int rc = posix_spawnp(&pid_, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    if (rc != 0) {
      pid_ = -1;
      close(fds[0]);
      return Status::IOError(std::string("posix_spawn ") + argv[0], rc);
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
    std::string reported = line.substr(13);
    reported.erase(reported.find_last_not_of("\r\n") + 1);
    return Sockaddr::Parse(reported, addr);
  }

  // SIGTERM, then waits for it to exit, at most `timeout` (then SIGKILL):
  // its exit status, or -1 if it had to be killed.
  int Terminate(MonoDelta timeout) {
    if (pid_ <= 0) return -1;
    kill(pid_, SIGTERM);
    const MonoTime deadline = MonoTime::Now() + timeout;
    int status = 0;
    while (MonoTime::Now() < deadline) {
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      usleep(2000);
    }
    Kill();
    return -1;
  }
  pid_t pid() const { return pid_; }

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
