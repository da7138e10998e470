// Server reflection (MessengerBuilder::set_reflection): what it lists, the
// definitions it answers and builds from, what it refuses to describe, and
// that a server has none unless asked.
#include <google/protobuf/descriptor.pb.h>
#include <gtest/gtest.h>

#include "bench_service.h"
#include "osprey/rpc/reflection.pb.h"
#include "rpc_test_util.h"

namespace osprey::rpc_test {
namespace {

using reflection::FileContainingSymbolRequestPB;
using reflection::FileContainingSymbolResponsePB;
using reflection::ListServicesRequestPB;
using reflection::ListServicesResponsePB;

const char kReflection[] = "osprey.reflection.ServerReflection";

// A service written by hand, with no service descriptor behind it.
class HandWrittenService : public ServiceIf {
 public:
  HandWrittenService() {
    RegisterMethod(ServiceMethod{
        "Double", &AddRequestPB::default_instance(), &AddResponsePB::default_instance(),
        [](const google::protobuf::Message* req, google::protobuf::Message* resp, RpcContext* ctx) {
          static_cast<AddResponsePB*>(resp)->set_result(2 *
                                                        static_cast<const AddRequestPB*>(req)->x());
          ctx->RespondSuccess();
        }});
  }
  const std::string& service_name() const override {
    static const std::string name = "test.HandWritten";
    return name;
  }
};

class ReflectionTest : public ::testing::Test {
 protected:
  void StartServer(bool reflection) {
    ASSERT_TRUE(
        server_
            .Start(1, ServicePoolOptions(), MessengerBuilder("server").set_reflection(reflection))
            .ok());
    client_ = MakeClient();
    proxy_ = std::make_unique<Proxy>(client_, server_.address, kReflection);
  }
  Status Call(const std::string& method, const google::protobuf::Message& req,
              google::protobuf::Message* resp, RpcController* ctl) {
    ctl->set_timeout(MonoDelta::FromSeconds(10));
    return proxy_->SyncRequest(method, req, resp, ctl);
  }
  Status FilesFor(const std::string& symbol, FileContainingSymbolResponsePB* resp,
                  RpcController* ctl) {
    FileContainingSymbolRequestPB req;
    req.set_symbol(symbol);
    return Call("FileContainingSymbol", req, resp, ctl);
  }
  // Builds the answer into a fresh pool in the order sent, as the CLI does;
  // the names of the files, in that order.
  std::vector<std::string> BuildAll(const FileContainingSymbolResponsePB& resp,
                                    google::protobuf::DescriptorPool* pool) {
    std::vector<std::string> names;
    for (const std::string& bytes : resp.file_descriptor_proto()) {
      google::protobuf::FileDescriptorProto file;
      EXPECT_TRUE(file.ParseFromString(bytes));
      EXPECT_NE(pool->BuildFile(file), nullptr) << file.name() << " does not build in order";
      names.push_back(file.name());
    }
    return names;
  }

  TestServer server_;
  std::shared_ptr<Messenger> client_;
  std::unique_ptr<Proxy> proxy_;
};

TEST_F(ReflectionTest, IsOffUnlessAskedFor) {
  StartServer(false);
  ListServicesResponsePB resp;
  RpcController ctl;
  Status s = Call("ListServices", ListServicesRequestPB(), &resp, &ctl);
  ASSERT_TRUE(s.IsRemoteError()) << s.ToString();
  ASSERT_NE(ctl.error_response(), nullptr);
  EXPECT_EQ(ctl.error_response()->code(), wire::ErrorStatusPB::ERROR_NO_SUCH_SERVICE);
}

TEST_F(ReflectionTest, ListsEveryServiceWithItsMethodsAndTypes) {
  StartServer(true);
  // Registered after the messenger was built: listed too.
  ASSERT_TRUE(server_.messenger->RegisterService(std::make_unique<bench::BenchService>()).ok());
  ASSERT_TRUE(server_.messenger->RegisterService(std::make_unique<HandWrittenService>()).ok());
  ListServicesResponsePB resp;
  RpcController ctl;
  ASSERT_TRUE(Call("ListServices", ListServicesRequestPB(), &resp, &ctl).ok());
  std::vector<std::string> names;
  for (const auto& s : resp.services()) names.push_back(s.name());
  EXPECT_EQ(names,
            (std::vector<std::string>{"kudu.rpc_test.CalculatorService", kReflection,
                                      "osprey.rpc_test.CalculatorService", "test.HandWritten"}));
  const auto& calc = resp.services(2);
  EXPECT_TRUE(calc.has_descriptor());
  ASSERT_EQ(calc.methods_size(), 6);
  EXPECT_EQ(calc.methods(0).name(), "Add");  // by name
  EXPECT_EQ(calc.methods(0).request_type(), "osprey.rpc_test.AddRequestPB");
  EXPECT_EQ(calc.methods(0).response_type(), "osprey.rpc_test.AddResponsePB");
  EXPECT_EQ(calc.methods(5).name(), "WhoAmI");
  const auto& bench = resp.services(0);
  ASSERT_EQ(bench.methods_size(), 4);  // Add, AddExactlyOnce, Echo, Sleep
  EXPECT_EQ(bench.methods(1).name(), "AddExactlyOnce");
  EXPECT_TRUE(bench.methods(1).track_result());
  EXPECT_FALSE(bench.methods(0).track_result());
  const auto& hand = resp.services(3);
  EXPECT_FALSE(hand.has_descriptor());
  ASSERT_EQ(hand.methods_size(), 1);
  EXPECT_EQ(hand.methods(0).request_type(), "osprey.rpc_test.AddRequestPB");
}

TEST_F(ReflectionTest, AnswersAServiceWithItsImportsFirst) {
  StartServer(true);
  ASSERT_TRUE(server_.messenger->RegisterService(std::make_unique<bench::BenchService>()).ok());
  FileContainingSymbolResponsePB resp;
  RpcController ctl;
  // rpc_bench.proto imports Kudu's method options, which import protobuf's
  // descriptor.proto.
  ASSERT_TRUE(FilesFor("kudu.rpc_test.CalculatorService", &resp, &ctl).ok());
  google::protobuf::DescriptorPool pool;
  std::vector<std::string> files = BuildAll(resp, &pool);
  EXPECT_EQ(files, (std::vector<std::string>{"google/protobuf/descriptor.proto",
                                             "kudu/rpc/rpc_header.proto", "rpc_bench.proto"}));
  const google::protobuf::MethodDescriptor* m =
      pool.FindMethodByName("kudu.rpc_test.CalculatorService.AddExactlyOnce");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->input_type()->full_name(), "kudu.rpc_test.ExactlyOnceRequestPB");
  // Kudu's track_rpc_result option survives, as an option of the method.
  EXPECT_NE(m->DebugString().find("track_rpc_result"), std::string::npos) << m->DebugString();
}

TEST_F(ReflectionTest, AnswersMethodsMessagesAndTheMessagesOfAServiceWrittenByHand) {
  StartServer(true);
  ASSERT_TRUE(server_.messenger->RegisterService(std::make_unique<HandWrittenService>()).ok());
  for (const char* symbol :
       {"osprey.rpc_test.CalculatorService.Echo", "osprey.rpc_test.WhoAmIResponsePB"}) {
    FileContainingSymbolResponsePB resp;
    RpcController ctl;
    ASSERT_TRUE(FilesFor(symbol, &resp, &ctl).ok()) << symbol;
    google::protobuf::DescriptorPool pool;
    BuildAll(resp, &pool);
    EXPECT_NE(pool.FindFileContainingSymbol(symbol), nullptr) << symbol;
  }
  // The hand-written service has no descriptor to send.
  FileContainingSymbolResponsePB resp;
  RpcController ctl;
  Status s = FilesFor("test.HandWritten", &resp, &ctl);
  EXPECT_TRUE(s.IsRemoteError()) << s.ToString();
  EXPECT_NE(s.message().find("no service, method, message or enum named \"test.HandWritten\""),
            std::string::npos)
      << s.ToString();
}

TEST_F(ReflectionTest, DescribesNothingTheServicesDoNotUse) {
  StartServer(true);
  // Linked into the server (the wire headers, the token format) but no
  // registered service's: not described.
  for (const char* symbol : {"osprey.wire.RequestHeader", "no.such.Thing", ""}) {
    FileContainingSymbolResponsePB resp;
    RpcController ctl;
    Status s = FilesFor(symbol, &resp, &ctl);
    EXPECT_TRUE(s.IsRemoteError()) << symbol << ": " << s.ToString();
    ASSERT_NE(ctl.error_response(), nullptr);
    EXPECT_EQ(ctl.error_response()->code(), wire::ErrorStatusPB::ERROR_APPLICATION);
    EXPECT_EQ(resp.file_descriptor_proto_size(), 0);
  }
  // The server serves on.
  CalculatorServiceProxy calc(client_, server_.address);
  EXPECT_TRUE(CheckedAdd(calc, 2, 3).ok());
}

}  // namespace
}  // namespace osprey::rpc_test
