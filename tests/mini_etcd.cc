#include "mini_etcd.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "osprey/base/base64.h"
#include "osprey/base/monotime.h"
#include "osprey/rpc/etcd_registry.h"

namespace osprey::test {

namespace {

int FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  close(fd);
  return port;
}

}  // namespace

bool MiniEtcd::Available() { return access(kBinary, X_OK) == 0; }

Status MiniEtcd::Make(const Tls* tls, std::unique_ptr<MiniEtcd>* out) {
  std::unique_ptr<MiniEtcd> etcd(new MiniEtcd());
  if (tls != nullptr) etcd->tls_ = *tls;
  std::string tmpl = (std::filesystem::temp_directory_path() / "osprey-etcd-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) return Status::IOError("mkdtemp failed");
  etcd->dir_ = tmpl;
  etcd->client_port_ = FreeLoopbackPort();
  etcd->peer_port_ = FreeLoopbackPort();
  if (etcd->client_port_ == 0 || etcd->peer_port_ == 0 || etcd->client_port_ == etcd->peer_port_) {
    return Status::IOError("no free loopback ports for etcd");
  }
  etcd->initial_cluster_ = etcd->name_ + "=" + etcd->peer_url();
  *out = std::move(etcd);
  return Status::OK();
}

Status MiniEtcd::Start(std::unique_ptr<MiniEtcd>* out, const Tls* tls,
                       std::vector<std::string> extra_args) {
  std::unique_ptr<MiniEtcd> etcd;
  OSPREY_RETURN_NOT_OK(Make(tls, &etcd));
  etcd->extra_args_ = std::move(extra_args);
  OSPREY_RETURN_NOT_OK(etcd->Launch());
  *out = std::move(etcd);
  return Status::OK();
}

Status MiniEtcd::StartCluster(int members, std::vector<std::unique_ptr<MiniEtcd>>* out) {
  std::vector<std::unique_ptr<MiniEtcd>> cluster(static_cast<size_t>(members));
  std::string initial;
  for (int i = 0; i < members; ++i) {
    OSPREY_RETURN_NOT_OK(Make(nullptr, &cluster[static_cast<size_t>(i)]));
    MiniEtcd& m = *cluster[static_cast<size_t>(i)];
    m.name_ = "m" + std::to_string(i);
    initial += (i > 0 ? "," : "") + m.name_ + "=" + m.peer_url();
  }
  // All started before any is waited for: none answers before a quorum.
  for (auto& m : cluster) {
    m->initial_cluster_ = initial;
    OSPREY_RETURN_NOT_OK(m->Spawn());
  }
  for (auto& m : cluster) OSPREY_RETURN_NOT_OK(m->WaitReady());
  *out = std::move(cluster);
  return Status::OK();
}

std::string MiniEtcd::ClusterTarget(const std::vector<std::unique_ptr<MiniEtcd>>& cluster,
                                    const std::string& prefix) {
  std::string endpoints;
  for (const auto& m : cluster) endpoints += (endpoints.empty() ? "" : ",") + m->endpoint();
  return "etcd://" + endpoints + prefix;
}

std::string MiniEtcd::peer_url() const { return "http://127.0.0.1:" + std::to_string(peer_port_); }

Status MiniEtcd::Launch() {
  OSPREY_RETURN_NOT_OK(Spawn());
  return WaitReady();
}

Status MiniEtcd::Spawn() {
  const std::string client =
      (tls_ ? "https://127.0.0.1:" : "http://127.0.0.1:") + std::to_string(client_port_);
  const std::string peer = peer_url();
  std::vector<std::string> args = {
      kBinary, "--name", name_, "--data-dir", dir_ + "/data", "--listen-client-urls", client,
      "--advertise-client-urls", client, "--listen-peer-urls", peer,
      "--initial-advertise-peer-urls", peer, "--initial-cluster", initial_cluster_,
      // A quick election after a restart; leases may be as short as 1 s.
      "--heartbeat-interval", "50", "--election-timeout", "500"};
  if (tls_) {
    for (const std::string& a :
         {std::string("--cert-file"), tls_->cert_file, std::string("--key-file"), tls_->key_file}) {
      args.push_back(a);
    }
    if (!tls_->client_ca_file.empty()) {
      for (const std::string& a : {std::string("--client-cert-auth"),
                                   std::string("--trusted-ca-file"), tls_->client_ca_file}) {
        args.push_back(a);
      }
    }
  }
  args.insert(args.end(), extra_args_.begin(), extra_args_.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string log = dir_ + "/etcd.log";
  pid_t pid = fork();
  if (pid < 0) return Status::IOError("fork failed");
  if (pid == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
    execv(kBinary, argv.data());
    _exit(127);
  }
  pid_ = pid;
  return Status::OK();
}

Status MiniEtcd::WaitReady() {
  const std::string log = dir_ + "/etcd.log";
  // Ready when it answers a read (its cluster has a leader).
  EtcdHttp http({endpoint()}, tls_.has_value(), tls_ ? tls_->check : EtcdTlsFiles{}, root_);
  const MonoTime deadline = MonoTime::Now() + MonoDelta::FromSeconds(15);
  for (int i = 0; i < 300 && MonoTime::Now() < deadline; ++i) {
    std::string answer;
    if (http.Post("/v3/kv/range", "{\"key\":\"AA==\"}", MonoDelta::FromMilliseconds(300), &answer)
            .ok()) {
      return Status::OK();
    }
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return Status::IllegalState("etcd exited at start; see " + log);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Status::TimedOut("etcd did not answer on " + endpoint() + "; see " + log);
}

Status MiniEtcd::EnableAuth(const std::vector<User>& users) {
  if (!tls_) return Status::IllegalState("etcd's passwords go only over TLS: start it with Tls");
  EtcdHttp http({endpoint()}, true, tls_->check);
  const auto post = [&](const char* path, const nlohmann::json& body) {
    std::string answer;
    return http.Post(path, body.dump(), MonoDelta::FromSeconds(5), &answer);
  };
  const EtcdCredentials root{"root", "root-" + std::to_string(getpid()) + "-" + dir_};
  OSPREY_RETURN_NOT_OK(
      post("/v3/auth/user/add", {{"name", root.user}, {"password", root.password}}));
  OSPREY_RETURN_NOT_OK(post("/v3/auth/user/grant", {{"user", root.user}, {"role", "root"}}));
  for (const User& u : users) {
    OSPREY_RETURN_NOT_OK(post("/v3/auth/role/add", {{"name", u.name}}));
    OSPREY_RETURN_NOT_OK(
        post("/v3/auth/role/grant", {{"name", u.name},
                                     {"perm",
                                      {{"permType", "READWRITE"},
                                       {"key", Base64Encode(u.prefix + "/")},
                                       {"range_end", Base64Encode(u.prefix + "0")}}}}));
    OSPREY_RETURN_NOT_OK(post("/v3/auth/user/add", {{"name", u.name}, {"password", u.password}}));
    OSPREY_RETURN_NOT_OK(post("/v3/auth/user/grant", {{"user", u.name}, {"role", u.name}}));
  }
  OSPREY_RETURN_NOT_OK(post("/v3/auth/enable", nlohmann::json::object()));
  root_ = root;
  return Status::OK();
}

Status MiniEtcd::Stop() {
  if (pid_ <= 0) return Status::IllegalState("etcd is not running");
  kill(pid_, SIGKILL);
  int status;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  return Status::OK();
}

Status MiniEtcd::Pause() {
  if (pid_ <= 0) return Status::IllegalState("etcd is not running");
  return kill(pid_, SIGSTOP) == 0 ? Status::OK() : Status::IOError("SIGSTOP failed");
}

Status MiniEtcd::Resume() {
  if (pid_ <= 0) return Status::IllegalState("etcd is not running");
  return kill(pid_, SIGCONT) == 0 ? Status::OK() : Status::IOError("SIGCONT failed");
}

Status MiniEtcd::Restart() {
  if (pid_ > 0) return Status::IllegalState("etcd is running");
  return Launch();
}

Status MiniEtcd::RestartEmpty() {
  if (pid_ > 0) return Status::IllegalState("etcd is running");
  std::error_code error;
  std::filesystem::remove_all(dir_ + "/data", error);
  if (error) return Status::IOError("removing " + dir_ + "/data: " + error.message());
  return Launch();
}

MiniEtcd::~MiniEtcd() {
  if (pid_ > 0) (void)Stop();
  std::error_code ignored;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
}

}  // namespace osprey::test
