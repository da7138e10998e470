// DescriptorSource: where the osprey command learns the services of a
// server and the message types of their methods: .proto files
// (ProtoFileSource), or the server itself (ReflectionSource). Not
// thread-safe: one command, one thread.
#pragma once

#include <google/protobuf/compiler/importer.h>
#include <google/protobuf/descriptor.h>

#include <memory>
#include <string>
#include <vector>

#include "osprey/base/status.h"
#include "osprey/rpc/proxy.h"
#include "osprey/rpc/reflection.pb.h"

namespace osprey::cli {

struct MethodSummary {
  std::string name;
  std::string request_type;  // fully qualified
  std::string response_type;
  // Kudu's track_rpc_result: calls carry request ids.
  bool track_result = false;
};
struct ServiceSummary {
  std::string name;
  std::vector<MethodSummary> methods;  // by name
};

class DescriptorSource {
 public:
  virtual ~DescriptorSource() = default;
  // The services there are, by name.
  virtual Status ListServices(std::vector<ServiceSummary>* out) = 0;
  // The definition of `symbol` (a service, method, message or enum, fully
  // qualified): NotFound, saying where it was looked for, if none.
  virtual Status FindSymbol(const std::string& symbol) = 0;
  // Where FindSymbol() put what it found.
  virtual const google::protobuf::DescriptorPool* pool() const = 0;
};

// The services defined in `proto_files` (paths on disk, each under one of
// `import_dirs`, or under the current directory if none are given), with
// what they import. protobuf's own .proto files (descriptor.proto, ...)
// are found without an -I.
class ProtoFileSource : public DescriptorSource {
 public:
  // InvalidArgument naming each file, line and column that does not parse.
  static Status Open(const std::vector<std::string>& proto_files,
                     const std::vector<std::string>& import_dirs,
                     std::unique_ptr<ProtoFileSource>* out);
  ~ProtoFileSource() override;
  Status ListServices(std::vector<ServiceSummary>* out) override;
  Status FindSymbol(const std::string& symbol) override;
  const google::protobuf::DescriptorPool* pool() const override { return importer_->pool(); }

 private:
  class ErrorCollector;
  ProtoFileSource();
  google::protobuf::compiler::DiskSourceTree tree_;
  std::unique_ptr<ErrorCollector> errors_;
  std::unique_ptr<google::protobuf::compiler::Importer> importer_;
  std::vector<const google::protobuf::FileDescriptor*> files_;  // those given
};

// The services of a server with reflection on
// (MessengerBuilder::set_reflection), asked through `proxy`, a proxy of
// osprey.reflection.ServerReflection. A server without it (a Kudu server)
// fails every lookup with NotFound "no reflection on this server; give
// --proto".
class ReflectionSource : public DescriptorSource {
 public:
  ReflectionSource(std::unique_ptr<Proxy> proxy, MonoDelta timeout);
  Status ListServices(std::vector<ServiceSummary>* out) override;
  Status FindSymbol(const std::string& symbol) override;
  const google::protobuf::DescriptorPool* pool() const override { return &pool_; }

 private:
  Status Call(const std::string& method, const google::protobuf::Message& request,
              google::protobuf::Message* response);
  const std::unique_ptr<Proxy> proxy_;
  const MonoDelta timeout_;
  bool listed_ = false;
  std::vector<ServiceSummary> services_;
  google::protobuf::DescriptorPool pool_;
};

// Builds a FileContainingSymbol answer into `pool`, the files in the order
// sent (imports first), skipping those `pool` has: Corruption if a file
// does not parse or does not build (an import missing, a definition that
// makes no sense). What a hostile server sends stops here.
Status AddReflectionAnswer(const reflection::FileContainingSymbolResponsePB& answer,
                           google::protobuf::DescriptorPool* pool);

// `service.method`'s summary from `source`: NotFound saying which services
// or methods there are instead.
Status FindMethod(DescriptorSource* source, const std::string& service_dot_method,
                  std::string* service, MethodSummary* method);
// A message type, loaded through `source`.
Status FindMessage(DescriptorSource* source, const std::string& full_name,
                   const google::protobuf::Descriptor** out);
// The .proto text of `symbol`: a service, method, message or enum.
Status Describe(DescriptorSource* source, const std::string& symbol, std::string* out);
// Services and their methods as .proto text, one line each.
std::string FormatServiceList(const std::vector<ServiceSummary>& services);
// "A, B and C".
std::string JoinNames(const std::vector<std::string>& names);

}  // namespace osprey::cli
