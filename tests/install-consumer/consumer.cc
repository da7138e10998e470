// Serves and calls EchoService in one process; exits 0 when the echo
// matches and the service's authorization hook ran.
#include <cstdio>
#include <string_view>

// A user's own thread-safety macros (as Abseil's or Kudu's gutil's name
// theirs), defined before Osprey's headers: Osprey's installed headers
// define only OSPREY_-prefixed ones, so the user's stay the user's.
#define GUARDED_BY(x) users_own(x)
#define REQUIRES(...) users_own(__VA_ARGS__)

#include "echo.osprey.h"

#define CONSUMER_TEXT(x) #x
#define CONSUMER_EXPANDED(x) CONSUMER_TEXT(x)
static_assert(std::string_view(CONSUMER_EXPANDED(GUARDED_BY(m))) == "users_own(m)",
              "an Osprey header redefined GUARDED_BY");
static_assert(std::string_view(CONSUMER_EXPANDED(REQUIRES(m))) == "users_own(m)",
              "an Osprey header redefined REQUIRES");

class Echo : public consumer::EchoServiceIf {
 public:
  void Ping(const consumer::PingPB* req, consumer::PingPB* resp, osprey::RpcContext* ctx) override {
    resp->set_text(req->text());
    ctx->RespondSuccess();
  }
  bool AuthorizeAnyone(const google::protobuf::Message*, google::protobuf::Message*,
                       osprey::RpcContext*) override {
    authorized = true;
    return true;
  }
  bool authorized = false;
};

int main() {
  std::shared_ptr<osprey::Messenger> m;
  osprey::Sockaddr addr;
  osprey::Status s = osprey::MessengerBuilder("consumer").Build(&m);
  auto service = std::make_unique<Echo>();
  Echo* echo = service.get();
  if (s.ok()) s = m->RegisterService(std::move(service));
  if (s.ok()) s = m->Listen(osprey::Sockaddr::Loopback(0), &addr);
  consumer::EchoServiceProxy proxy(m, addr);
  consumer::PingPB req, resp;
  req.set_text("hello");
  osprey::RpcController ctl;
  if (s.ok()) s = proxy.Ping(req, &resp, &ctl);
  if (!s.ok() || resp.text() != "hello" || !echo->authorized) {
    std::fprintf(stderr, "consumer: %s (authorized: %d)\n", s.ToString().c_str(),
                 echo->authorized ? 1 : 0);
    return 1;
  }
  std::printf("consumer: echo ok\n");
  return 0;
}
