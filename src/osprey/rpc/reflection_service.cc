#include "osprey/rpc/reflection_service.h"

#include <google/protobuf/descriptor.pb.h>

#include <algorithm>
#include <functional>

#include "osprey/rpc/rpc_context.h"

namespace osprey {

using google::protobuf::DescriptorPool;
using google::protobuf::FileDescriptor;
using google::protobuf::FileDescriptorProto;
using reflection::FileContainingSymbolRequestPB;
using reflection::FileContainingSymbolResponsePB;
using reflection::ListServicesRequestPB;
using reflection::ListServicesResponsePB;

void ServiceDirectory::AddFile(const FileDescriptor* file) {
  if (!files_.insert(file).second) return;
  if (std::find(pools_.begin(), pools_.end(), file->pool()) == pools_.end()) {
    pools_.push_back(file->pool());
  }
  for (int i = 0; i < file->dependency_count(); ++i) AddFile(file->dependency(i));
}

void ServiceDirectory::Add(const ServiceIf& service) {
  ListServicesResponsePB::ServicePB entry;
  entry.set_name(service.service_name());
  std::vector<const ServiceMethod*> methods = service.methods();
  std::sort(methods.begin(), methods.end(),
            [](const ServiceMethod* a, const ServiceMethod* b) { return a->name < b->name; });
  const google::protobuf::ServiceDescriptor* descriptor =
      DescriptorPool::generated_pool()->FindServiceByName(service.service_name());
  entry.set_has_descriptor(descriptor != nullptr);
  MutexLock l(mu_);
  if (descriptor != nullptr) AddFile(descriptor->file());
  for (const ServiceMethod* m : methods) {
    ListServicesResponsePB::MethodPB* pb = entry.add_methods();
    pb->set_name(m->name);
    const google::protobuf::Descriptor* req = m->request_prototype->GetDescriptor();
    const google::protobuf::Descriptor* resp = m->response_prototype->GetDescriptor();
    pb->set_request_type(req->full_name());
    pb->set_response_type(resp->full_name());
    pb->set_track_result(m->track_result);
    AddFile(req->file());
    AddFile(resp->file());
  }
  *services_.add_services() = std::move(entry);
  std::sort(services_.mutable_services()->begin(), services_.mutable_services()->end(),
            [](const auto& a, const auto& b) { return a.name() < b.name(); });
}

ListServicesResponsePB ServiceDirectory::List() const {
  MutexLock l(mu_);
  return services_;
}

Status ServiceDirectory::FilesContaining(const std::string& symbol,
                                         FileContainingSymbolResponsePB* out) const {
  MutexLock l(mu_);
  const FileDescriptor* file = nullptr;
  for (const DescriptorPool* pool : pools_) {
    const FileDescriptor* f = pool->FindFileContainingSymbol(symbol);
    if (f != nullptr && files_.count(f)) {
      file = f;
      break;
    }
  }
  if (file == nullptr) {
    return Status::NotFound("no service, method, message or enum named \"" + symbol +
                            "\" on this server");
  }
  // Imports first, each file once.
  std::unordered_set<const FileDescriptor*> sent;
  std::function<void(const FileDescriptor*)> send = [&](const FileDescriptor* f) {
    if (!sent.insert(f).second) return;
    for (int i = 0; i < f->dependency_count(); ++i) send(f->dependency(i));
    FileDescriptorProto proto;
    f->CopyTo(&proto);
    proto.SerializeToString(out->add_file_descriptor_proto());
  };
  send(file);
  return Status::OK();
}

const std::string& ReflectionService::static_service_name() {
  static const std::string name = reflection::ListServicesRequestPB::descriptor()
                                      ->file()
                                      ->FindServiceByName("ServerReflection")
                                      ->full_name();
  return name;
}

const std::string& ReflectionService::service_name() const { return static_service_name(); }

ReflectionService::ReflectionService(std::shared_ptr<const ServiceDirectory> directory)
    : directory_(std::move(directory)) {
  RegisterMethod(ServiceMethod{
      "ListServices", &ListServicesRequestPB::default_instance(),
      &ListServicesResponsePB::default_instance(),
      [this](const google::protobuf::Message*, google::protobuf::Message* resp, RpcContext* ctx) {
        *static_cast<ListServicesResponsePB*>(resp) = directory_->List();
        ctx->RespondSuccess();
      }});
  RegisterMethod(
      ServiceMethod{"FileContainingSymbol", &FileContainingSymbolRequestPB::default_instance(),
                    &FileContainingSymbolResponsePB::default_instance(),
                    [this](const google::protobuf::Message* req, google::protobuf::Message* resp,
                           RpcContext* ctx) {
                      Status s = directory_->FilesContaining(
                          static_cast<const FileContainingSymbolRequestPB*>(req)->symbol(),
                          static_cast<FileContainingSymbolResponsePB*>(resp));
                      if (s.ok()) {
                        ctx->RespondSuccess();
                      } else {
                        ctx->RespondFailure(s);
                      }
                    }});
}

}  // namespace osprey
