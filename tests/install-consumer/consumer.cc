// Serves and calls EchoService in one process; exits 0 when the echo
// matches and the service's authorization hook ran.
#include <cstdio>

#include "echo.osprey.h"

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
