// Calls calculator.CalculatorService: a sync Add, an async Add, a Divide by
// zero (a remote error) and a call with a tiny timeout.
//   calculator_client [HOST:PORT]   (default 127.0.0.1:7070)
#include <cstdio>

#include "calculator.osprey.h"
#include "osprey/base/countdown_latch.h"

int main(int argc, char** argv) {
  osprey::Sockaddr addr;
  osprey::Status s = osprey::Sockaddr::Parse(argc > 1 ? argv[1] : "127.0.0.1:7070", &addr);
  std::shared_ptr<osprey::Messenger> messenger;
  if (s.ok())
    s = osprey::MessengerBuilder("calculator-client").set_num_reactors(1).Build(&messenger);
  if (!s.ok()) {
    std::fprintf(stderr, "calculator_client: %s\n", s.ToString().c_str());
    return 2;
  }
  calculator::CalculatorServiceProxy proxy(messenger, addr);

  calculator::AddRequestPB add;
  add.set_x(40);
  add.set_y(2);
  calculator::AddResponsePB sum;
  osprey::RpcController ctl;
  ctl.set_timeout(osprey::MonoDelta::FromSeconds(5));
  s = proxy.Add(add, &sum, &ctl);
  if (!s.ok()) {
    std::fprintf(stderr, "sync Add failed: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("sync  Add(40, 2)      = %lld\n", static_cast<long long>(sum.sum()));

  osprey::CountDownLatch done(1);
  ctl.Reset();
  add.set_x(1000);
  proxy.AddAsync(add, &sum, &ctl, [&] { done.CountDown(); });
  done.Wait();
  std::printf("async Add(1000, 2)    = %s\n", ctl.status().ok() ? std::to_string(sum.sum()).c_str()
                                                                : ctl.status().ToString().c_str());

  calculator::DivideRequestPB div;
  div.set_dividend(1);
  div.set_divisor(0);
  calculator::DivideResponsePB quotient;
  ctl.Reset();
  s = proxy.Divide(div, &quotient, &ctl);
  std::printf("Divide(1, 0)          -> %s\n", s.ToString().c_str());

  ctl.Reset();
  ctl.set_timeout(osprey::MonoDelta::FromMicroseconds(1));
  s = proxy.Add(add, &sum, &ctl);
  std::printf("Add with 1us timeout  -> %s\n", s.ToString().c_str());
  return 0;
}
