#include "mini_kdc.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

namespace osprey::test {

namespace {

// Debian puts krb5kdc and kadmin.local in /usr/sbin, which a test's PATH
// may lack.
std::string Bin(const std::string& name) {
  for (const char* dir : {"/usr/sbin/", "/usr/bin/", "/sbin/"}) {
    std::string p = std::string(dir) + name;
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return name;
}

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

bool Listening(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  close(fd);
  return ok;
}

}  // namespace

Status MiniKdc::Start(std::unique_ptr<MiniKdc>* out, const std::string& extra_libdefaults) {
  if (access(Bin("krb5kdc").c_str(), X_OK) != 0 || access(Bin("kadmin.local").c_str(), X_OK) != 0 ||
      access(Bin("kinit").c_str(), X_OK) != 0) {
    return Status::NotFound(
        "MiniKdc needs MIT Kerberos: apt-get install krb5-kdc krb5-admin-server krb5-user");
  }
  std::unique_ptr<MiniKdc> kdc(new MiniKdc());
  std::string tmpl = (std::filesystem::temp_directory_path() / "osprey-kdc.XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) return Status::IOError("mkdtemp failed");
  kdc->dir_ = tmpl;
  kdc->ccache_ = "FILE:" + kdc->Path("ccache");
  kdc->port_ = FreeLoopbackPort();
  if (kdc->port_ == 0) return Status::IOError("no free loopback port for the KDC");
  std::string port = std::to_string(kdc->port_);
  std::ofstream(kdc->Path("kdc.conf")) << "[kdcdefaults]\n"
                                       << "  kdc_listen = 127.0.0.1:" << port << "\n"
                                       << "  kdc_tcp_listen = 127.0.0.1:" << port << "\n"
                                       << "[realms]\n"
                                       << "  " << kRealm << " = {\n"
                                       << "    database_name = " << kdc->Path("principal") << "\n"
                                       << "    key_stash_file = " << kdc->Path("stash") << "\n"
                                       << "    acl_file = " << kdc->Path("kadm5.acl") << "\n"
                                       << "    max_life = 1d\n"
                                       << "  }\n"
                                       << "[logging]\n"
                                       << "  kdc = FILE:" << kdc->Path("kdc.log") << "\n"
                                       << "  default = FILE:" << kdc->Path("krb5lib.log") << "\n";
  kdc->extra_libdefaults_ = extra_libdefaults;
  kdc->WriteKrb5Conf(kdc->port_);
  std::ofstream(kdc->Path("kadm5.acl")) << "*/admin@" << kRealm << " *\n";
  setenv("KRB5_CONFIG", kdc->Path("krb5.conf").c_str(), 1);
  setenv("KRB5_KDC_PROFILE", kdc->Path("kdc.conf").c_str(), 1);
  setenv("KRB5CCNAME", kdc->ccache_.c_str(), 1);
  // A replay cache of the realm's own, away from the machine's.
  setenv("KRB5RCACHEDIR", kdc->dir_.c_str(), 1);
  unsetenv("KRB5_KTNAME");
  unsetenv("KRB5_CLIENT_KTNAME");
  OSPREY_RETURN_NOT_OK(kdc->Run(Bin("kdb5_util") + " create -s -r " + kRealm + " -P master -W"));
  OSPREY_RETURN_NOT_OK(kdc->StartKdc());
  *out = std::move(kdc);
  return Status::OK();
}

MiniKdc::~MiniKdc() {
  (void)StopKdc();
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

void MiniKdc::WriteKrb5Conf(int kdc_port) const {
  // Loopback addresses have no reverse DNS: names stay as dialled. TCP to
  // the KDC, so that a stopped KDC is refused at once.
  std::ofstream(Path("krb5.conf")) << "[libdefaults]\n"
                                   << "  default_realm = " << kRealm << "\n"
                                   << "  dns_lookup_kdc = false\n"
                                   << "  dns_lookup_realm = false\n"
                                   << "  dns_canonicalize_hostname = false\n"
                                   << "  rdns = false\n"
                                   << "  udp_preference_limit = 1\n"
                                   << "  " << extra_libdefaults_ << "\n"
                                   << "[realms]\n"
                                   << "  " << kRealm << " = {\n"
                                   << "    kdc = 127.0.0.1:" << kdc_port << "\n"
                                   << "  }\n";
}

Status MiniKdc::UseKdcPort(int port) {
  WriteKrb5Conf(port);
  return Status::OK();
}

Status MiniKdc::Run(const std::string& command, std::string* output) const {
  std::string full = command + " 2>&1";
  FILE* p = popen(full.c_str(), "r");
  if (p == nullptr) return Status::IOError("cannot run " + command);
  std::string text;
  std::array<char, 512> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) text.append(buf.data(), n);
  int rc = pclose(p);
  if (output != nullptr) *output = text;
  if (rc != 0) return Status::IllegalState(command + " failed: " + text);
  return Status::OK();
}

Status MiniKdc::StartKdc() {
  if (kdc_pid_ > 0) return Status::OK();
  std::string bin = Bin("krb5kdc");
  pid_t pid = fork();
  if (pid < 0) return Status::IOError("fork failed");
  if (pid == 0) {
    // -n: in the foreground, so that the PID is the KDC's.
    execl(bin.c_str(), bin.c_str(), "-n", "-r", kRealm, static_cast<char*>(nullptr));
    _exit(127);
  }
  kdc_pid_ = pid;
  for (int i = 0; i < 200; ++i) {  // up to 10 s
    if (Listening(port_)) return Status::OK();
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      kdc_pid_ = -1;
      std::string log;
      std::ifstream f(Path("kdc.log"));
      log.assign(std::istreambuf_iterator<char>(f), {});
      return Status::IllegalState("krb5kdc exited at start: " + log);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Status::TimedOut("krb5kdc did not listen on 127.0.0.1:" + std::to_string(port_));
}

Status MiniKdc::StopKdc() {
  if (kdc_pid_ <= 0) return Status::OK();
  kill(kdc_pid_, SIGTERM);
  int status;
  for (int i = 0; i < 100; ++i) {  // up to 5 s, then SIGKILL
    if (waitpid(kdc_pid_, &status, WNOHANG) == kdc_pid_) {
      kdc_pid_ = -1;
      return Status::OK();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(kdc_pid_, SIGKILL);
  waitpid(kdc_pid_, &status, 0);
  kdc_pid_ = -1;
  return Status::OK();
}

Status MiniKdc::AddPrincipalWithKeytab(const std::string& principal, const std::string& keytab) {
  std::string kt = keytab.empty() || keytab[0] == '/' ? keytab : Path(keytab);
  OSPREY_RETURN_NOT_OK(
      Run(Bin("kadmin.local") + " -r " + kRealm + " -q 'addprinc -randkey " + principal + "'"));
  return Run(Bin("kadmin.local") + " -r " + kRealm + " -q 'ktadd -k " + kt + " " + principal + "'");
}

Status MiniKdc::DeletePrincipal(const std::string& principal) {
  return Run(Bin("kadmin.local") + " -r " + kRealm + " -q 'delprinc -force " + principal + "'");
}

Status MiniKdc::Kinit(const std::string& principal, const std::string& keytab,
                      const std::string& lifetime) {
  std::string kt = keytab[0] == '/' ? keytab : Path(keytab);
  std::string cmd = Bin("kinit") + " -c " + ccache_ + " -kt " + kt;
  if (!lifetime.empty()) cmd += " -l " + lifetime;
  return Run(cmd + " " + principal);
}

Status MiniKdc::Kdestroy() { return Run(Bin("kdestroy") + " -q -c " + ccache_); }

Status MiniKdc::WriteKeytabOutsideTheKdc(const std::string& principal, const std::string& keytab) {
  std::string kt = keytab[0] == '/' ? keytab : Path(keytab);
  std::string script = Path("ktutil.in");
  std::ofstream(script) << "addent -password -p " << principal
                        << " -k 1 -e aes256-cts-hmac-sha1-96\n"
                        << "not-a-secret\n"
                        << "wkt " << kt << "\n"
                        << "quit\n";
  OSPREY_RETURN_NOT_OK(Run(Bin("ktutil") + " < " + script));
  if (!std::filesystem::exists(kt)) return Status::IllegalState("ktutil wrote no " + kt);
  return Status::OK();
}

// A file ticket cache (format 4) starts: 0x05 0x04, a 16-bit header length,
// then tagged fields; tag 1 is the KDC time offset (32-bit seconds, 32-bit
// microseconds). All big-endian.
Status MiniKdc::SkewTicketCacheClock(int32_t seconds) {
  std::string path = Path("ccache");
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (bytes.size() < 4 || bytes[0] != 5 || bytes[1] != 4) {
    return Status::IllegalState(path + " is not a version 4 ticket cache");
  }
  auto be16 = [&](size_t at) {
    return static_cast<size_t>(static_cast<uint8_t>(bytes[at]) << 8 |
                               static_cast<uint8_t>(bytes[at + 1]));
  };
  auto put32 = [](std::string* s, size_t at, uint32_t v) {
    for (int i = 0; i < 4; i++) (*s)[at + i] = static_cast<char>(v >> (24 - 8 * i));
  };
  const size_t header_len = be16(2);
  if (4 + header_len > bytes.size()) return Status::IllegalState(path + ": a short header");
  for (size_t at = 4; at + 4 <= 4 + header_len;) {
    size_t tag = be16(at), len = be16(at + 2);
    if (tag == 1 && len == 8) {
      put32(&bytes, at + 4, static_cast<uint32_t>(seconds));
      put32(&bytes, at + 8, 0);
      std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
      return Status::OK();
    }
    at += 4 + len;
  }
  // No offset yet: add the field.
  std::string field(12, '\0');
  field[1] = 1;
  field[3] = 8;
  put32(&field, 4, static_cast<uint32_t>(seconds));
  bytes.insert(4 + header_len, field);
  bytes[2] = static_cast<char>((header_len + 12) >> 8);
  bytes[3] = static_cast<char>((header_len + 12) & 0xff);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return Status::OK();
}

}  // namespace osprey::test
