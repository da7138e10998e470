// protoc-gen-osprey: a protoc plugin that writes, for every service Foo in a
// .proto file, FooServiceIf (a ServiceIf with one pure virtual method per
// rpc) and FooServiceProxy (typed sync and async calls), into
// <file>.osprey.h and <file>.osprey.cc beside protoc's <file>.pb.h.
#include <google/protobuf/compiler/code_generator.h>
#include <google/protobuf/compiler/plugin.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/io/printer.h>
#include <google/protobuf/io/zero_copy_stream.h>
#include <google/protobuf/unknown_field_set.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

namespace {

using google::protobuf::Descriptor;
using google::protobuf::FileDescriptor;
using google::protobuf::MethodDescriptor;
using google::protobuf::ServiceDescriptor;
using google::protobuf::compiler::CodeGenerator;
using google::protobuf::compiler::GeneratorContext;
using google::protobuf::io::Printer;
using google::protobuf::io::ZeroCopyOutputStream;

std::string StripProto(const std::string& name) {
  for (const char* ext : {".protodevel", ".proto"}) {
    std::string e(ext);
    if (name.size() > e.size() && name.compare(name.size() - e.size(), e.size(), e) == 0) {
      return name.substr(0, name.size() - e.size());
    }
  }
  return name;
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

// "kudu.rpc_test.AddRequestPB" -> "::kudu::rpc_test::AddRequestPB"
std::string CppType(const Descriptor* d) { return "::" + Replace(d->full_name(), ".", "::"); }

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    out.push_back(s.substr(start, pos - start));
    if (pos == std::string::npos) break;
    start = pos + 1;
  }
  return out;
}

// Kudu's options (kudu/rpc/rpc_header.proto), read by field number: the
// plugin is not linked with their generated code, so protoc hands them
// over as unknown fields of the options messages.
constexpr int kTrackRpcResult = 50006;  // MethodOptions, bool
constexpr int kAuthzMethod = 50007;     // MethodOptions, string
constexpr int kDefaultAuthz = 50007;    // ServiceOptions, string

const google::protobuf::UnknownField* FindOption(const google::protobuf::UnknownFieldSet& fields,
                                                 int number) {
  const google::protobuf::UnknownField* last = nullptr;  // the last one wins, as in protobuf
  for (int i = 0; i < fields.field_count(); ++i) {
    if (fields.field(i).number() == number) last = &fields.field(i);
  }
  return last;
}

bool TracksResult(const MethodDescriptor* m) {
  const auto* f = FindOption(m->options().unknown_fields(), kTrackRpcResult);
  return f != nullptr && f->type() == google::protobuf::UnknownField::TYPE_VARINT &&
         f->varint() != 0;
}

// protobuf's own method option `idempotency_level`: IDEMPOTENT or
// NO_SIDE_EFFECTS marks a method whose calls may run twice without harm
// (retried after they may have reached a server, and hedged).
bool Idempotent(const MethodDescriptor* m) {
  return m->options().idempotency_level() != google::protobuf::MethodOptions::IDEMPOTENCY_UNKNOWN;
}

// The method's authz_method, else its service's default_authz_method, else "".
std::string AuthzMethod(const MethodDescriptor* m) {
  const auto* f = FindOption(m->options().unknown_fields(), kAuthzMethod);
  if (f == nullptr) f = FindOption(m->service()->options().unknown_fields(), kDefaultAuthz);
  if (f == nullptr || f->type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) return "";
  return f->length_delimited();
}

bool IsIdentifier(const std::string& s) {
  if (s.empty() || (s[0] >= '0' && s[0] <= '9')) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'))
      return false;
  }
  return true;
}

class OspreyGenerator : public CodeGenerator {
 public:
  bool Generate(const FileDescriptor* file, const std::string& /*parameter*/,
                GeneratorContext* context, std::string* error) const override {
    if (file->service_count() == 0) {
      // Still write the files, so build rules can list them unconditionally.
    }
    for (int i = 0; i < file->service_count(); ++i) {
      const ServiceDescriptor* svc = file->service(i);
      for (int j = 0; j < svc->method_count(); ++j) {
        const MethodDescriptor* m = svc->method(j);
        if (m->client_streaming() || m->server_streaming()) {
          *error = "osprey: streaming rpc " + m->full_name() + " is not supported";
          return false;
        }
        std::string authz = AuthzMethod(m);
        if (!authz.empty() && !IsIdentifier(authz)) {
          *error = "osprey: authz_method '" + authz + "' of " + m->full_name() +
                   " is not a C++ method name";
          return false;
        }
      }
    }
    std::string base = StripProto(file->name());
    std::vector<std::string> ns =
        file->package().empty() ? std::vector<std::string>() : Split(file->package(), '.');
    {
      std::unique_ptr<ZeroCopyOutputStream> out(context->Open(base + ".osprey.h"));
      Printer p(out.get(), '$');
      WriteHeader(file, base, ns, &p);
    }
    {
      std::unique_ptr<ZeroCopyOutputStream> out(context->Open(base + ".osprey.cc"));
      Printer p(out.get(), '$');
      WriteSource(file, base, ns, &p);
    }
    return true;
  }

 private:
  static void OpenNamespaces(const std::vector<std::string>& ns, Printer* p) {
    for (const auto& n : ns) p->Print("namespace $n$ {\n", "n", n);
    p->Print("\n");
  }
  static void CloseNamespaces(const std::vector<std::string>& ns, Printer* p) {
    for (auto it = ns.rbegin(); it != ns.rend(); ++it) p->Print("}  // namespace $n$\n", "n", *it);
  }

  static void WriteHeader(const FileDescriptor* file, const std::string& base,
                          const std::vector<std::string>& ns, Printer* p) {
    p->Print(
        "// Generated by protoc-gen-osprey from $file$. Do not edit.\n"
        "#pragma once\n\n"
        "#include <string>\n\n"
        "#include \"$base$.pb.h\"\n"
        "#include \"osprey/rpc/messenger.h\"\n"
        "#include \"osprey/rpc/proxy.h\"\n"
        "#include \"osprey/rpc/rpc_context.h\"\n"
        "#include \"osprey/rpc/rpc_controller.h\"\n"
        "#include \"osprey/rpc/service_if.h\"\n\n",
        "file", file->name(), "base", base);
    OpenNamespaces(ns, p);
    for (int i = 0; i < file->service_count(); ++i) {
      const ServiceDescriptor* svc = file->service(i);
      p->Print(
          "// Server side of $full$: implement each method and respond through\n"
          "// the RpcContext exactly once.\n"
          "class $name$If : public ::osprey::ServiceIf {\n"
          " public:\n"
          "  $name$If();\n"
          "  ~$name$If() override;\n"
          "  const std::string& service_name() const override;\n"
          "  static const std::string& static_service_name();\n\n",
          "name", svc->name(), "full", svc->full_name());
      for (int j = 0; j < svc->method_count(); ++j) {
        const MethodDescriptor* m = svc->method(j);
        p->Print(
            "  virtual void $m$(const $req$* req, $resp$* resp, ::osprey::RpcContext* ctx) = 0;\n",
            "m", m->name(), "req", CppType(m->input_type()), "resp", CppType(m->output_type()));
      }
      std::set<std::string> authz_methods;
      for (int j = 0; j < svc->method_count(); ++j) {
        std::string a = AuthzMethod(svc->method(j));
        if (!a.empty()) authz_methods.insert(a);
      }
      if (!authz_methods.empty()) {
        p->Print(
            "\n  // Authorization (Kudu's authz_method options): run before the handlers\n"
            "  // of the methods that name them. Return false to refuse the call; if\n"
            "  // you answered nothing, it is refused as Kudu refuses it.\n");
      }
      for (const std::string& a : authz_methods) {
        p->Print(
            "  virtual bool $a$(const ::google::protobuf::Message* req,\n"
            "      ::google::protobuf::Message* resp, ::osprey::RpcContext* ctx) = 0;\n",
            "a", a);
      }
      p->Print("};\n\n");
      p->Print(
          "// Client side of $full$. Thread-safe; one RpcController per call.\n"
          "class $name$Proxy : public ::osprey::Proxy {\n"
          " public:\n"
          "  $name$Proxy(std::shared_ptr<::osprey::Messenger> messenger,\n"
          "      const ::osprey::Sockaddr& remote);\n"
          "  // `host_port`: \"name:port\", resolved as ::osprey::Proxy says.\n"
          "  $name$Proxy(std::shared_ptr<::osprey::Messenger> messenger,\n"
          "      std::string host_port);\n"
          "  ~$name$Proxy();\n\n",
          "name", svc->name(), "full", svc->full_name());
      for (int j = 0; j < svc->method_count(); ++j) {
        const MethodDescriptor* m = svc->method(j);
        p->Print(
            "  ::osprey::Status $m$(const $req$& req, $resp$* resp,\n"
            "      ::osprey::RpcController* ctl) const;\n"
            "  void $m$Async(const $req$& req, $resp$* resp,\n"
            "      ::osprey::RpcController* ctl, ::osprey::ResponseCallback cb) const;\n",
            "m", m->name(), "req", CppType(m->input_type()), "resp", CppType(m->output_type()));
      }
      p->Print("};\n\n");
    }
    CloseNamespaces(ns, p);
  }

  static void WriteSource(const FileDescriptor* file, const std::string& base,
                          const std::vector<std::string>& ns, Printer* p) {
    p->Print(
        "// Generated by protoc-gen-osprey from $file$. Do not edit.\n"
        "#include \"$base$.osprey.h\"\n\n",
        "file", file->name(), "base", base);
    OpenNamespaces(ns, p);
    for (int i = 0; i < file->service_count(); ++i) {
      const ServiceDescriptor* svc = file->service(i);
      p->Print(
          "const std::string& $name$If::static_service_name() {\n"
          "  static const std::string kName = \"$full$\";\n"
          "  return kName;\n"
          "}\n\n"
          "const std::string& $name$If::service_name() const { return static_service_name(); }\n\n"
          "$name$If::~$name$If() = default;\n\n"
          "$name$If::$name$If() {\n",
          "name", svc->name(), "full", svc->full_name());
      for (int j = 0; j < svc->method_count(); ++j) {
        const MethodDescriptor* m = svc->method(j);
        p->Print(
            "  RegisterMethod(::osprey::ServiceMethod{\n"
            "      \"$m$\", &$req$::default_instance(), &$resp$::default_instance(),\n"
            "      [this](const ::google::protobuf::Message* req, ::google::protobuf::Message* "
            "resp,\n"
            "             ::osprey::RpcContext* ctx) {\n"
            "        $m$(static_cast<const $req$*>(req), static_cast<$resp$*>(resp), ctx);\n"
            "      },\n",
            "m", m->name(), "req", CppType(m->input_type()), "resp", CppType(m->output_type()));
        std::string authz = AuthzMethod(m);
        if (authz.empty()) {
          p->Print("      nullptr,\n");
        } else {
          p->Print(
              "      [this](const ::google::protobuf::Message* req, ::google::protobuf::Message* "
              "resp,\n"
              "             ::osprey::RpcContext* ctx) { return $a$(req, resp, ctx); },\n",
              "a", authz);
        }
        p->Print("      /*track_result=*/$t$});\n", "t", TracksResult(m) ? "true" : "false");
      }
      p->Print("}\n\n");
      p->Print(
          "$name$Proxy::$name$Proxy(std::shared_ptr<::osprey::Messenger> messenger,\n"
          "    const ::osprey::Sockaddr& remote)\n"
          "    : ::osprey::Proxy(std::move(messenger), remote, $name$If::static_service_name()) "
          "{}\n\n"
          "$name$Proxy::$name$Proxy(std::shared_ptr<::osprey::Messenger> messenger,\n"
          "    std::string host_port)\n"
          "    : ::osprey::Proxy(std::move(messenger), std::move(host_port),\n"
          "                      $name$If::static_service_name()) {}\n\n"
          "$name$Proxy::~$name$Proxy() = default;\n\n",
          "name", svc->name());
      for (int j = 0; j < svc->method_count(); ++j) {
        const MethodDescriptor* m = svc->method(j);
        p->Print(
            "::osprey::Status $name$Proxy::$m$(const $req$& req, $resp$* resp,\n"
            "    ::osprey::RpcController* ctl) const {\n"
            "  static const ::osprey::RemoteMethod kMethod($name$If::static_service_name(), "
            "\"$m$\", $t$, $i$);\n"
            "  return SyncRequest(kMethod, req, resp, ctl);\n"
            "}\n\n"
            "void $name$Proxy::$m$Async(const $req$& req, $resp$* resp,\n"
            "    ::osprey::RpcController* ctl, ::osprey::ResponseCallback cb) const {\n"
            "  static const ::osprey::RemoteMethod kMethod($name$If::static_service_name(), "
            "\"$m$\", $t$, $i$);\n"
            "  AsyncRequest(kMethod, req, resp, ctl, std::move(cb));\n"
            "}\n\n",
            "name", svc->name(), "m", m->name(), "req", CppType(m->input_type()), "resp",
            CppType(m->output_type()), "t",
            TracksResult(m) ? "/*track_result=*/true" : "/*track_result=*/false", "i",
            Idempotent(m) ? "/*idempotent=*/true" : "/*idempotent=*/false");
      }
    }
    CloseNamespaces(ns, p);
  }
};

}  // namespace

int main(int argc, char* argv[]) {
  OspreyGenerator generator;
  return google::protobuf::compiler::PluginMain(argc, argv, &generator);
}
