#include "commands.h"

#include <fcntl.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/unknown_field_set.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <sstream>

#include "descriptor_source.h"
#include "message_format.h"
#include "osprey/rpc/messenger.h"
#include "osprey/rpc/proxy.h"
#include "osprey/rpc/rpc_controller.h"
#include "terminal_text.h"

namespace osprey::cli {

namespace {

const char kReflectionService[] = "osprey.reflection.ServerReflection";

// Every message goes through here: it may hold text the server chose.
int Fail(int code, const std::string& why) {
  std::cerr << "osprey: " << ForOutput(STDERR_FILENO, why) << "\n";
  return code;
}

Status ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::InvalidArgument("cannot read " + path);
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (in.bad()) return Status::InvalidArgument("cannot read " + path);
  return Status::OK();
}

// A lookup's failure: our own findings (NotFound, InvalidArgument) as
// they are, anything from the server or the network with its kind.
std::string Explain(const Status& s) {
  return s.IsNotFound() || s.IsInvalidArgument() ? s.message() : s.ToString();
}

// One client messenger, and proxies to the one address.
class Session {
 public:
  Status Open(const ConnectionFlags& flags, const std::string& address) {
    flags_ = flags;
    address_ = address;
    if (!flags.tls_ca_file.empty() && flags.rpc_encryption != "required") {
      // With optional encryption an active attacker answers without TLS,
      // and the CA is never asked: the user would believe in a check that
      // did not happen.
      return Status::InvalidArgument(
          "--tls_ca_file verifies the server only if TLS is required: add --rpc_encryption "
          "required (with " +
          flags.rpc_encryption +
          ", a man in the middle can turn TLS off and the CA is never used)");
    }
    MessengerBuilder b("osprey");
    b.set_num_reactors(1).set_metrics(false);
    if (flags.rpc_encryption == "optional") {
      b.set_rpc_encryption(RpcEncryption::kOptional);
    } else if (flags.rpc_encryption == "required") {
      b.set_rpc_encryption(RpcEncryption::kRequired);
    }
    // A CA file is a promise that the server is verified: on loopback
    // too, where authentication-only TLS would leave every call after the
    // verified handshake in the clear for anyone to answer (issue 47).
    b.set_rpc_encrypt_loopback(flags.rpc_encrypt_loopback_connections ||
                               !flags.tls_ca_file.empty());
    if (!flags.tls_ca_file.empty()) b.set_tls_ca_file(flags.tls_ca_file);
    return b.Build(&messenger_);
  }
  std::unique_ptr<Proxy> NewProxy(const std::string& service) const {
    std::unique_ptr<Proxy> proxy;
    Sockaddr addr;
    // A Unix socket is an address; anything else keeps its name, which TLS
    // checks the server's certificate against.
    if (address_.rfind("unix:", 0) == 0 && Sockaddr::Parse(address_, &addr).ok()) {
      proxy = std::make_unique<Proxy>(messenger_, addr, service);
    } else {
      proxy = std::make_unique<Proxy>(messenger_, address_, service);
    }
    if (!flags_.user.empty()) proxy->set_user(flags_.user);
    return proxy;
  }
  MonoDelta timeout() const { return MonoDelta::FromSeconds(flags_.timeout_seconds); }
  ~Session() {
    if (messenger_) messenger_->Shutdown();
  }

 private:
  ConnectionFlags flags_;
  std::string address_;
  std::shared_ptr<Messenger> messenger_;
};

// The source of definitions the flags name. `*local`: from .proto files,
// so a lookup that fails is the command line's fault.
Status OpenSource(const SourceFlags& flags, const Session& session,
                  std::unique_ptr<DescriptorSource>* out, bool* local) {
  *local = !flags.protos.empty();
  if (*local) {
    std::unique_ptr<ProtoFileSource> files;
    OSPREY_RETURN_NOT_OK(ProtoFileSource::Open(flags.protos, flags.import_dirs, &files));
    *out = std::move(files);
  } else {
    if (!flags.import_dirs.empty()) {
      return Status::InvalidArgument("-I is for --proto files, and none are given");
    }
    *out =
        std::make_unique<ReflectionSource>(session.NewProxy(kReflectionService), session.timeout());
  }
  return Status::OK();
}

// The application error extensions of `err` (Kudu's services put their
// own message there, as CalculatorError's app_error_ext), as `format`
// when `pool` declares the extension, else by number and size.
std::string ApplicationErrorDetail(const wire::ErrorStatusPB& err,
                                   const google::protobuf::DescriptorPool* pool,
                                   MessageFormat format) {
  const google::protobuf::UnknownFieldSet& unknown = err.GetReflection()->GetUnknownFields(err);
  std::string out;
  for (int i = 0; i < unknown.field_count(); ++i) {
    const google::protobuf::UnknownField& f = unknown.field(i);
    if (f.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) continue;
    const google::protobuf::FieldDescriptor* ext = nullptr;
    for (const char* extended : {"kudu.rpc.ErrorStatusPB", "osprey.wire.ErrorStatusPB"}) {
      const google::protobuf::Descriptor* d = pool->FindMessageTypeByName(extended);
      if (d != nullptr && ext == nullptr) ext = pool->FindExtensionByNumber(d, f.number());
    }
    google::protobuf::DynamicMessageFactory factory(pool);
    std::unique_ptr<google::protobuf::Message> detail;
    if (ext != nullptr && ext->message_type() != nullptr) {
      detail.reset(factory.GetPrototype(ext->message_type())->New());
    }
    if (detail != nullptr && detail->ParsePartialFromString(f.length_delimited())) {
      out += "\nits detail (" + ext->full_name() +
             "): " + PrintMessage(format, *detail, Layout::kOneLine);
    } else {
      out += "\nits detail: error extension " + std::to_string(f.number()) + ", " +
             std::to_string(f.length_delimited().size()) +
             " bytes, of a type the .proto files do not declare";
    }
  }
  return out;
}

// The client to `address` and the source of definitions the flags name:
// what every subcommand starts with. Any failure is the command line's.
Status OpenAll(const ConnectionFlags& connection, const SourceFlags& source_flags,
               const std::string& address, Session* session,
               std::unique_ptr<DescriptorSource>* source, bool* local) {
  OSPREY_RETURN_NOT_OK(session->Open(connection, address));
  return OpenSource(source_flags, *session, source, local);
}

// Why a call failed, in the server's own terms when it answered.
std::string DescribeFailure(const Status& s, const RpcController& ctl, const Session& session,
                            const google::protobuf::DescriptorPool* pool, MessageFormat format) {
  const wire::ErrorStatusPB* err = ctl.error_response();
  if (err == nullptr) return s.ToString();
  std::string why = err->has_code() ? "the server answered " +
                                          wire::ErrorStatusPB::RpcErrorCodePB_Name(err->code()) +
                                          ": " + err->message()
                                    // Kudu's application errors carry no code.
                                    : "the server answered an application error: " + err->message();
  why += ApplicationErrorDetail(*err, pool, format);
  if (err->code() == wire::ErrorStatusPB::ERROR_NO_SUCH_SERVICE ||
      err->code() == wire::ErrorStatusPB::ERROR_NO_SUCH_METHOD) {
    // The --proto files named something the server lacks: say what it has,
    // if it can tell.
    ReflectionSource reflection(session.NewProxy(kReflectionService), session.timeout());
    std::vector<ServiceSummary> services;
    if (reflection.ListServices(&services).ok()) {
      why += "\nthe server has:\n" + FormatServiceList(services);
      if (why.back() == '\n') why.pop_back();
    }
  }
  return why;
}

Status ReadRequest(const CallFlags& flags, std::string* out) {
  if (!flags.request.empty() && !flags.data.empty()) {
    return Status::InvalidArgument("give the request once: as an argument or with -d, not both");
  }
  const std::string& given = flags.request.empty() ? flags.data : flags.request;
  if (given == "@-") {
    out->assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    return Status::OK();
  }
  if (given.rfind('@', 0) == 0) return ReadFile(given.substr(1), out);
  *out = given;
  return Status::OK();
}

// Most files one response may make --save_sidecars write. A KRPC response
// may carry 10,000 sidecars; a hostile server would have every one written.
constexpr int kMaxSidecarFiles = 100;

// Closes a descriptor when it goes out of scope.
class ClosingFd {
 public:
  explicit ClosingFd(int fd) : fd_(fd) {}
  ~ClosingFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  ClosingFd(const ClosingFd&) = delete;
  ClosingFd& operator=(const ClosingFd&) = delete;
  int get() const { return fd_; }

 private:
  const int fd_;
};

Status SaveSidecars(const RpcController& ctl, const std::string& dir) {
  const int n = ctl.num_inbound_sidecars();
  if (n == 0) return Status::OK();
  if (dir.empty()) {
    std::cerr << "osprey: the response has " << n << " sidecar" << (n == 1 ? "" : "s")
              << "; --save_sidecars DIR writes them to files\n";
    return Status::OK();
  }
  if (n > kMaxSidecarFiles) {
    return Status::InvalidArgument("the response has " + std::to_string(n) +
                                   " sidecars, more than the " + std::to_string(kMaxSidecarFiles) +
                                   " --save_sidecars writes: none written");
  }
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::IOError("cannot make directory " + dir, errno);
  }
  // DIR itself is never a symbolic link (someone could point it anywhere
  // the user may write), and is the user's own, which nobody else may
  // write to (else they could plant or swap entries in it). Files are then
  // made relative to the directory opened here, so a rename of DIR or of
  // a path above it after these checks changes nothing.
  ClosingFd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (dfd.get() < 0) {
    int err = errno;
    if (err == ELOOP || err == ENOTDIR) {
      return Status::IOError("cannot use " + dir +
                             " for sidecars: it is a symbolic link or not a directory");
    }
    return Status::IOError("cannot open directory " + dir, err);
  }
  struct stat st;
  if (::fstat(dfd.get(), &st) != 0) return Status::IOError("cannot stat " + dir, errno);
  if (st.st_uid != ::geteuid()) {
    return Status::IOError("cannot use " + dir +
                           " for sidecars: it is not yours (its owner is uid " +
                           std::to_string(st.st_uid) + "); use a directory of your own");
  }
  if ((st.st_mode & S_IWOTH) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status::IOError("cannot use " + dir + " for sidecars: others may write to it (mode " +
                           mode + "); use a directory of your own");
  }
  for (int i = 0; i < n; ++i) {
    Slice data;
    OSPREY_RETURN_NOT_OK(ctl.GetInboundSidecar(i, &data));
    const std::string name = "sidecar-" + std::to_string(i);
    const std::string path = dir + "/" + name;
    // A new file only: never through a symbolic link someone left there,
    // never over a file that exists.
    int fd = ::openat(dfd.get(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                      0644);
    if (fd < 0) {
      int err = errno;
      return Status::IOError("cannot create " + path +
                                 (err == EEXIST ? " (it exists: sidecars are never written over "
                                                  "a file, or through a link)"
                                                : ""),
                             err);
    }
    size_t off = 0;
    while (off < data.size()) {
      ssize_t n = ::write(fd, data.data() + off, data.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        int err = errno;
        ::close(fd);
        return Status::IOError("cannot write " + path, err);
      }
      off += static_cast<size_t>(n);
    }
    if (::close(fd) != 0) return Status::IOError("cannot write " + path, errno);
    std::cerr << "osprey: sidecar " << i << " (" << data.size() << " bytes) written to " << path
              << "\n";
  }
  return Status::OK();
}

std::string Millis(double ms) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3f", ms);
  return buf;
}

void PrintLatencySummary(std::vector<double> ms) {
  if (ms.empty()) return;
  std::sort(ms.begin(), ms.end());
  double sum = 0;
  for (double v : ms) sum += v;
  auto at = [&](double q) {
    return ms[std::min(ms.size() - 1, static_cast<size_t>(q * ms.size()))];
  };
  std::cerr << ms.size() << " calls, latency in ms: min " << Millis(ms.front()) << ", median "
            << Millis(at(0.5)) << ", p99 " << Millis(at(0.99)) << ", max " << Millis(ms.back())
            << ", mean " << Millis(sum / ms.size()) << "\n";
}

}  // namespace

int RunCall(const ConnectionFlags& connection, const SourceFlags& source_flags,
            const CallFlags& flags) {
  const MessageFormat format = flags.format == "text" ? MessageFormat::kText : MessageFormat::kJson;
  std::string request_text;
  Status s = ReadRequest(flags, &request_text);
  if (!s.ok()) return Fail(kExitUsage, s.message());
  std::vector<std::string> sidecars(flags.sidecars.size());
  for (size_t i = 0; i < flags.sidecars.size(); ++i) {
    s = ReadFile(flags.sidecars[i], &sidecars[i]);
    if (!s.ok()) return Fail(kExitUsage, s.message());
  }
  Session session;
  std::unique_ptr<DescriptorSource> source;
  bool local = false;
  s = OpenAll(connection, source_flags, flags.address, &session, &source, &local);
  if (!s.ok()) return Fail(kExitUsage, s.message());

  std::string service;
  MethodSummary method;
  const google::protobuf::Descriptor* request_type = nullptr;
  const google::protobuf::Descriptor* response_type = nullptr;
  s = FindMethod(source.get(), flags.method, &service, &method);
  if (s.ok()) s = FindMessage(source.get(), method.request_type, &request_type);
  if (s.ok()) s = FindMessage(source.get(), method.response_type, &response_type);
  if (!s.ok()) {
    return Fail(local || s.IsInvalidArgument() ? kExitUsage : kExitFailed, Explain(s));
  }

  google::protobuf::DynamicMessageFactory factory(source->pool());
  std::unique_ptr<google::protobuf::Message> request(factory.GetPrototype(request_type)->New());
  std::unique_ptr<google::protobuf::Message> response(factory.GetPrototype(response_type)->New());
  s = ParseMessage(format, request_text, request.get());
  if (!s.ok()) return Fail(kExitUsage, s.message());

  std::unique_ptr<Proxy> proxy = session.NewProxy(service);
  // Outlives every call (a RemoteMethod given by reference must).
  const RemoteMethod remote_method(service, method.name, method.track_result);
  std::vector<double> latencies_ms;
  for (int i = 0; i < flags.repeat; ++i) {
    RpcController ctl;
    ctl.set_timeout(session.timeout());
    for (const std::string& data : sidecars) {
      int idx;
      s = ctl.AddOutboundSidecar(data, &idx);
      if (!s.ok()) return Fail(kExitUsage, "sidecar: " + s.message());
    }
    response->Clear();
    auto start = std::chrono::steady_clock::now();
    s = proxy->SyncRequest(remote_method, *request, response.get(), &ctl);
    latencies_ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
    if (!s.ok()) {
      std::string why = DescribeFailure(s, ctl, session, source->pool(), format);
      if (flags.repeat > 1) {
        latencies_ms.pop_back();
        PrintLatencySummary(latencies_ms);
        why = "call " + std::to_string(i + 1) + " of " + std::to_string(flags.repeat) +
              " failed: " + why;
      }
      return Fail(kExitFailed, why);
    }
    if (i + 1 == flags.repeat) {
      std::cout << ForOutput(STDOUT_FILENO, PrintMessage(format, *response)) << std::flush;
      s = SaveSidecars(ctl, flags.save_sidecars);
      if (!s.ok()) return Fail(kExitFailed, s.ToString());
    }
  }
  if (flags.repeat > 1) PrintLatencySummary(latencies_ms);
  return kExitOk;
}

int RunList(const ConnectionFlags& connection, const SourceFlags& source_flags,
            const std::string& address) {
  Session session;
  std::unique_ptr<DescriptorSource> source;
  bool local = false;
  Status s = OpenAll(connection, source_flags, address, &session, &source, &local);
  if (!s.ok()) return Fail(kExitUsage, s.message());
  std::vector<ServiceSummary> services;
  s = source->ListServices(&services);
  if (!s.ok()) return Fail(kExitFailed, Explain(s));
  if (services.empty()) {
    std::cerr << "osprey: "
              << (local ? "the given .proto files define no service"
                        : "the server registers no service")
              << "\n";
  }
  std::cout << ForOutput(STDOUT_FILENO, FormatServiceList(services)) << std::flush;
  return kExitOk;
}

int RunDescribe(const ConnectionFlags& connection, const SourceFlags& source_flags,
                const std::string& address, const std::string& symbol) {
  Session session;
  std::unique_ptr<DescriptorSource> source;
  bool local = false;
  Status s = OpenAll(connection, source_flags, address, &session, &source, &local);
  if (!s.ok()) return Fail(kExitUsage, s.message());
  std::string text;
  s = Describe(source.get(), symbol, &text);
  if (!s.ok() && !local && s.IsRemoteError()) {
    // A service registered without a descriptor: its summary is all there is.
    std::vector<ServiceSummary> services;
    if (source->ListServices(&services).ok()) {
      for (const ServiceSummary& service : services) {
        if (service.name == symbol) {
          std::cout << ForOutput(STDOUT_FILENO, FormatServiceList({service})) << std::flush;
          return kExitOk;
        }
      }
    }
  }
  if (!s.ok()) {
    return Fail(local ? kExitUsage : kExitFailed, Explain(s));
  }
  std::cout << ForOutput(STDOUT_FILENO, text) << std::flush;
  return kExitOk;
}

}  // namespace osprey::cli
