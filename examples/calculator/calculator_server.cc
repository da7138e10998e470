// Serves calculator.CalculatorService until SIGINT or SIGTERM.
//   calculator_server [HOST:PORT]   (default 127.0.0.1:7070)
#include <csignal>
#include <cstdio>

#include "calculator.osprey.h"

namespace {

class Calculator : public calculator::CalculatorServiceIf {
 public:
  void Add(const calculator::AddRequestPB* req, calculator::AddResponsePB* resp,
           osprey::RpcContext* ctx) override {
    resp->set_sum(req->x() + req->y());
    ctx->RespondSuccess();
  }
  void Divide(const calculator::DivideRequestPB* req, calculator::DivideResponsePB* resp,
              osprey::RpcContext* ctx) override {
    if (req->divisor() == 0) {
      ctx->RespondFailure(osprey::Status::InvalidArgument("division by zero"));
      return;
    }
    resp->set_quotient(req->dividend() / req->divisor());
    ctx->RespondSuccess();
  }
};

}  // namespace

int main(int argc, char** argv) {
  // Block the signals before any thread starts, so every thread inherits the
  // mask and sigwait() below is the only place they arrive.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  osprey::Sockaddr addr;
  osprey::Status s = osprey::Sockaddr::Parse(argc > 1 ? argv[1] : "127.0.0.1:7070", &addr);
  std::shared_ptr<osprey::Messenger> messenger;
  if (s.ok())
    s = osprey::MessengerBuilder("calculator-server").set_num_reactors(2).Build(&messenger);
  if (s.ok()) s = messenger->RegisterService(std::make_unique<Calculator>());
  osprey::Sockaddr bound;
  if (s.ok()) s = messenger->Listen(addr, &bound);
  if (!s.ok()) {
    std::fprintf(stderr, "calculator_server: %s\n", s.ToString().c_str());
    return 2;
  }
  std::printf("listening on %s\n", bound.ToString().c_str());
  std::fflush(stdout);

  int sig = 0;
  sigwait(&signals, &sig);
  std::printf("signal %d: shutting down\n", sig);
  messenger->Shutdown();
  return 0;
}
