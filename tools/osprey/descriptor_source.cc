#include "descriptor_source.h"

#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/unknown_field_set.h>
#include <unistd.h>

#include <algorithm>

#include "kudu/rpc/rpc_header.pb.h"
#include "osprey/rpc/rpc_controller.h"

namespace osprey::cli {

using google::protobuf::Descriptor;
using google::protobuf::DescriptorPool;
using google::protobuf::FileDescriptor;
using google::protobuf::FileDescriptorProto;
using google::protobuf::compiler::DiskSourceTree;

std::string JoinNames(const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) out += i + 1 == names.size() ? " and " : ", ";
    out += names[i];
  }
  return out.empty() ? "none" : out;
}

std::string FormatServiceList(const std::vector<ServiceSummary>& services) {
  std::string out;
  for (const ServiceSummary& s : services) {
    out += "service " + s.name + " {\n";
    for (const MethodSummary& m : s.methods) {
      out += "  rpc " + m.name + "(" + m.request_type + ") returns (" + m.response_type + ");\n";
    }
    out += "}\n";
  }
  return out;
}

Status FindMethod(DescriptorSource* source, const std::string& service_dot_method,
                  std::string* service, MethodSummary* method) {
  size_t dot = service_dot_method.rfind('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == service_dot_method.size()) {
    return Status::InvalidArgument(
        "\"" + service_dot_method +
        "\" is not SERVICE.METHOD (as kudu.rpc_test.CalculatorService.Add)");
  }
  const std::string service_name = service_dot_method.substr(0, dot);
  const std::string method_name = service_dot_method.substr(dot + 1);
  std::vector<ServiceSummary> services;
  OSPREY_RETURN_NOT_OK(source->ListServices(&services));
  std::vector<std::string> names;
  for (const ServiceSummary& s : services) {
    names.push_back(s.name);
    if (s.name != service_name) continue;
    std::vector<std::string> methods;
    for (const MethodSummary& m : s.methods) {
      if (m.name == method_name) {
        *service = s.name;
        *method = m;
        return Status::OK();
      }
      methods.push_back(m.name);
    }
    return Status::NotFound("service " + service_name + " has no method " + method_name +
                            "; it has " + JoinNames(methods));
  }
  return Status::NotFound("no service " + service_name + "; there are " + JoinNames(names));
}

Status FindMessage(DescriptorSource* source, const std::string& full_name, const Descriptor** out) {
  OSPREY_RETURN_NOT_OK(source->FindSymbol(full_name));
  *out = source->pool()->FindMessageTypeByName(full_name);
  if (*out == nullptr) return Status::NotFound(full_name + " is not a message type");
  return Status::OK();
}

Status Describe(DescriptorSource* source, const std::string& symbol, std::string* out) {
  OSPREY_RETURN_NOT_OK(source->FindSymbol(symbol));
  const DescriptorPool* pool = source->pool();
  const FileDescriptor* file = pool->FindFileContainingSymbol(symbol);
  std::string text;
  if (auto* s = pool->FindServiceByName(symbol)) {
    text = s->DebugString();
  } else if (auto* m = pool->FindMethodByName(symbol)) {
    text = m->DebugString();
  } else if (auto* d = pool->FindMessageTypeByName(symbol)) {
    text = d->DebugString();
  } else if (auto* e = pool->FindEnumTypeByName(symbol)) {
    text = e->DebugString();
  } else {
    return Status::NotFound(symbol + " is not a service, method, message or enum");
  }
  // The definition names it without its package.
  *out = "// " + symbol + ", in " + file->name() + "\n" + text;
  return Status::OK();
}

// --- .proto files ---

namespace {

// <prefix>/include for this program at <prefix>/bin/osprey, wherever the
// prefix was moved to.
std::string InstalledIncludeDir() {
  char exe[4096];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return "/nonexistent";
  std::string path(exe, static_cast<size_t>(n));
  path.erase(path.rfind('/'));  // the bin directory
  return path + "/../include";
}

// Kudu's (kudu.rpc.track_rpc_result) on the method: known to this
// program's own generated pool, or, from a pool that parsed it without
// that, an unknown field of the method's options.
bool TracksResult(const google::protobuf::MethodDescriptor* m) {
  const google::protobuf::MethodOptions& options = m->options();
  if (options.HasExtension(kudu::rpc::track_rpc_result)) {
    return options.GetExtension(kudu::rpc::track_rpc_result);
  }
  const int number = kudu::rpc::kTrackRpcResultFieldNumber;
  const google::protobuf::UnknownFieldSet& unknown = options.unknown_fields();
  for (int i = unknown.field_count() - 1; i >= 0; --i) {  // the last one counts
    const google::protobuf::UnknownField& f = unknown.field(i);
    if (f.number() == number && f.type() == google::protobuf::UnknownField::TYPE_VARINT) {
      return f.varint() != 0;
    }
  }
  return false;
}

}  // namespace

class ProtoFileSource::ErrorCollector : public google::protobuf::compiler::MultiFileErrorCollector {
 public:
  void AddError(const std::string& file, int line, int column,
                const std::string& message) override {
    if (!errors.empty()) errors += "; ";
    // protobuf counts lines and columns from 0; editors from 1.
    errors += line < 0 ? file + ": " + message
                       : file + ":" + std::to_string(line + 1) + ":" + std::to_string(column + 1) +
                             ": " + message;
  }
  std::string errors;
};

ProtoFileSource::ProtoFileSource() : errors_(std::make_unique<ErrorCollector>()) {}
ProtoFileSource::~ProtoFileSource() = default;

Status ProtoFileSource::Open(const std::vector<std::string>& proto_files,
                             const std::vector<std::string>& import_dirs,
                             std::unique_ptr<ProtoFileSource>* out) {
  std::unique_ptr<ProtoFileSource> source(new ProtoFileSource());
  DiskSourceTree& tree = source->tree_;
  if (import_dirs.empty()) {
    tree.MapPath("", ".");
  } else {
    for (const std::string& dir : import_dirs) tree.MapPath("", dir);
  }
  // descriptor.proto and protobuf's other files, and what `cmake --install`
  // put beside Osprey's headers (Kudu's rpc_header.proto, reflection.proto),
  // after everything given.
  tree.MapPath("", OSPREY_PROTOBUF_INCLUDE_DIR);
  tree.MapPath("", InstalledIncludeDir());
  source->importer_ =
      std::make_unique<google::protobuf::compiler::Importer>(&tree, source->errors_.get());
  for (const std::string& disk : proto_files) {
    std::string virtual_file, shadowing;
    switch (tree.DiskFileToVirtualFile(disk, &virtual_file, &shadowing)) {
      case DiskSourceTree::SUCCESS:
        break;
      case DiskSourceTree::SHADOWED:
        return Status::InvalidArgument(disk + " is hidden by " + shadowing +
                                       ", which has the same name under an earlier -I");
      case DiskSourceTree::CANNOT_OPEN:
        return Status::InvalidArgument("cannot open " + disk);
      case DiskSourceTree::NO_MAPPING:
        return Status::InvalidArgument(
            disk + " is not under " +
            (import_dirs.empty() ? std::string("the current directory") : "any -I directory") +
            ": give the directory its imports are relative to with -I");
    }
    const FileDescriptor* file = source->importer_->Import(virtual_file);
    if (file == nullptr) {
      return Status::InvalidArgument("cannot load " + disk + ": " + source->errors_->errors);
    }
    source->files_.push_back(file);
  }
  *out = std::move(source);
  return Status::OK();
}

Status ProtoFileSource::ListServices(std::vector<ServiceSummary>* out) {
  out->clear();
  for (const FileDescriptor* f : files_) {
    for (int i = 0; i < f->service_count(); ++i) {
      const google::protobuf::ServiceDescriptor* s = f->service(i);
      ServiceSummary summary{s->full_name(), {}};
      for (int j = 0; j < s->method_count(); ++j) {
        const google::protobuf::MethodDescriptor* m = s->method(j);
        summary.methods.push_back({m->name(), m->input_type()->full_name(),
                                   m->output_type()->full_name(), TracksResult(m)});
      }
      std::sort(summary.methods.begin(), summary.methods.end(),
                [](const auto& a, const auto& b) { return a.name < b.name; });
      out->push_back(std::move(summary));
    }
  }
  std::sort(out->begin(), out->end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return Status::OK();
}

Status ProtoFileSource::FindSymbol(const std::string& symbol) {
  if (pool()->FindFileContainingSymbol(symbol) != nullptr) return Status::OK();
  return Status::NotFound("no service, method, message or enum named \"" + symbol +
                          "\" in the given .proto files or what they import");
}

// --- reflection ---

Status AddReflectionAnswer(const reflection::FileContainingSymbolResponsePB& answer,
                           DescriptorPool* pool) {
  for (const std::string& bytes : answer.file_descriptor_proto()) {
    FileDescriptorProto file;
    if (!file.ParseFromString(bytes)) {
      return Status::Corruption(
          "the server's reflection sent a file descriptor that does not parse");
    }
    if (pool->FindFileByName(file.name()) != nullptr) continue;
    if (pool->BuildFile(file) == nullptr) {
      return Status::Corruption("the server's reflection sent " + file.name() +
                                ", which does not build (an import missing or out of order, or a "
                                "definition that is not valid)");
    }
  }
  return Status::OK();
}

ReflectionSource::ReflectionSource(std::unique_ptr<Proxy> proxy, MonoDelta timeout)
    : proxy_(std::move(proxy)), timeout_(timeout) {}

Status ReflectionSource::Call(const std::string& method, const google::protobuf::Message& request,
                              google::protobuf::Message* response) {
  RpcController ctl;
  ctl.set_timeout(timeout_);
  Status s = proxy_->SyncRequest(method, request, response, &ctl);
  const wire::ErrorStatusPB* err = ctl.error_response();
  // A server without the service answers ERROR_NO_SUCH_SERVICE; a Kudu
  // server whose messenger was never told its services are all registered
  // (SetServicesRegistered) answers ERROR_UNAVAILABLE "service ... not
  // registered" instead.
  if (err != nullptr &&
      (err->code() == wire::ErrorStatusPB::ERROR_NO_SUCH_SERVICE ||
       (err->code() == wire::ErrorStatusPB::ERROR_UNAVAILABLE &&
        err->message().find(proxy_->service_name() + " not registered") != std::string::npos))) {
    return Status::NotFound("no reflection on this server; give --proto");
  }
  return s;
}

Status ReflectionSource::ListServices(std::vector<ServiceSummary>* out) {
  if (!listed_) {
    reflection::ListServicesResponsePB resp;
    OSPREY_RETURN_NOT_OK(Call("ListServices", reflection::ListServicesRequestPB(), &resp));
    for (const auto& s : resp.services()) {
      ServiceSummary summary{s.name(), {}};
      for (const auto& m : s.methods()) {
        summary.methods.push_back(
            {m.name(), m.request_type(), m.response_type(), m.track_result()});
      }
      services_.push_back(std::move(summary));
    }
    listed_ = true;
  }
  *out = services_;
  return Status::OK();
}

Status ReflectionSource::FindSymbol(const std::string& symbol) {
  if (pool_.FindFileContainingSymbol(symbol) != nullptr) return Status::OK();
  reflection::FileContainingSymbolRequestPB req;
  req.set_symbol(symbol);
  reflection::FileContainingSymbolResponsePB resp;
  Status s = Call("FileContainingSymbol", req, &resp);
  if (!s.ok()) return s;
  OSPREY_RETURN_NOT_OK(AddReflectionAnswer(resp, &pool_));
  if (pool_.FindFileContainingSymbol(symbol) == nullptr) {
    return Status::Corruption("the server's reflection did not send the definition of " + symbol);
  }
  return Status::OK();
}

}  // namespace osprey::cli
