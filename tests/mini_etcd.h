// MiniEtcd: a throw-away single-member etcd for tests (issue 50), Debian's
// etcd-server (/usr/bin/etcd), on 127.0.0.1 at free client and peer ports,
// with its data under a temporary directory that goes away with it. It can
// be stopped and started again on the same ports and data (an outage).
// One test thread uses it; etcd is a child process ended by its PID.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "osprey/base/status.h"
#include "osprey/rpc/etcd_registry.h"

namespace osprey::test {

class MiniEtcd {
 public:
  static constexpr const char* kBinary = "/usr/bin/etcd";
  // Whether etcd is installed (tests skip without it).
  static bool Available();
  // etcd serving HTTPS to its clients with `cert_file` and `key_file`;
  // with `client_ca_file`, it also requires a client certificate that CA
  // signed (--client-cert-auth); it must also trust cert_file, which
  // etcd's gateway presents to etcd's own gRPC port. `check` is what its
  // start-up check presents (the CA that signed cert_file, and a client
  // certificate).
  struct Tls {
    std::string cert_file, key_file, client_ca_file;
    EtcdTlsFiles check;
  };
  // Starts etcd and waits until it answers (a few seconds at most); over
  // TLS with `tls`; `extra_args` go to etcd's command line.
  static Status Start(std::unique_ptr<MiniEtcd>* out, const Tls* tls = nullptr,
                      std::vector<std::string> extra_args = {});
  // A cluster of `members` (3: one may go, and the others keep a quorum),
  // each its own process, directory and ports; ready when every member
  // answers.
  static Status StartCluster(int members, std::vector<std::unique_ptr<MiniEtcd>>* out);
  // "etcd://M0,M1,.../PREFIX": every member of `cluster`.
  static std::string ClusterTarget(const std::vector<std::unique_ptr<MiniEtcd>>& cluster,
                                   const std::string& prefix);
  ~MiniEtcd();  // kills it, removes the directory

  // Stops it (SIGKILL by PID: an outage, not a farewell) / starts it again
  // on the same ports and data directory.
  Status Stop();
  Status Restart();
  // Starts it again, stopped, on the same ports but with its data gone: an
  // etcd replaced by a new one (a lost disk, a cluster made again), whose
  // revisions start again at 1 and which holds no lease and no key.
  Status RestartEmpty();
  // SIGSTOP / SIGCONT by PID: a member that hangs. Its sockets stay open
  // and the kernel still accepts connections, but nothing answers; its
  // peers lose it as if it were cut off.
  Status Pause();
  Status Resume();

  // Turns etcd's authentication on (over TLS only): a root user with a
  // password of its own (root()), and each of `users` with a role that
  // may read and write the keys under its prefix ("PREFIX/..."), nothing
  // else. From then on this MiniEtcd checks readiness as root.
  struct User {
    std::string name, password, prefix;
  };
  Status EnableAuth(const std::vector<User>& users);
  const EtcdCredentials& root() const { return root_; }

  // "127.0.0.1:PORT", and "etcd://127.0.0.1:PORT/PREFIX" (etcds:// over
  // TLS).
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(client_port_); }
  std::string Target(const std::string& prefix) const {
    return (tls_ ? "etcds://" : "etcd://") + endpoint() + prefix;
  }
  const std::string& dir() const { return dir_; }

 private:
  MiniEtcd() = default;
  // A member not yet started: its directory and ports, alone in its cluster.
  static Status Make(const Tls* tls, std::unique_ptr<MiniEtcd>* out);
  std::string peer_url() const;
  Status Launch();     // Spawn, then WaitReady
  Status Spawn();      // the process, not waited for
  Status WaitReady();  // until it answers a read
  std::string name_ = "osprey-test";
  std::string initial_cluster_;  // --initial-cluster
  std::string dir_;
  int client_port_ = 0;
  int peer_port_ = 0;
  pid_t pid_ = -1;
  std::optional<Tls> tls_;
  std::vector<std::string> extra_args_;
  EtcdCredentials root_;  // empty until EnableAuth
};

}  // namespace osprey::test
