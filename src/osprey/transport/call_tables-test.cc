// The call tables of a connection: ids chosen, responses matched, calls
// that gave up forgotten without taking a later call's slot, and every call
// handed back on shutdown exactly once.
#include "osprey/transport/call_tables.h"

#include <gtest/gtest.h>

#include <climits>

namespace osprey::transport {
namespace {

class FakeCall : public ClientCall {
 public:
  explicit FakeCall(std::string name) : name_(std::move(name)) {}
  Status BuildRequestFrame(int32_t, std::unique_ptr<wire::OutboundFrame>*) override {
    return Status::OK();
  }
  void OnResponse(wire::InboundResponse) override {}
  void OnFailure(const Status&) override {}
  std::string Describe() const override { return name_; }

 private:
  std::string name_;
};

TEST(ClientCallTableTest, IdsCountUpAndSkipThoseInUse) {
  ClientCallTable table;
  EXPECT_EQ(0, table.NextFreeId());
  table.AddSent(1, std::make_shared<FakeCall>("one"));
  table.AddSent(2, std::make_shared<FakeCall>("two"));
  EXPECT_EQ(3, table.NextFreeId());  // 1 and 2 are in use
  EXPECT_EQ(2u, table.sent());
  EXPECT_EQ("one", table.TakeSent(1)->Describe());
  EXPECT_EQ(nullptr, table.TakeSent(1));  // a second response to one id is dropped
  EXPECT_EQ(1u, table.sent());
}

TEST(ClientCallTableTest, IdsWrapAtInt32MaxToZeroNeverNegativeNorInUse) {
  ClientCallTable table(INT32_MAX - 1);
  table.AddSent(0, std::make_shared<FakeCall>("long-running"));
  EXPECT_EQ(INT32_MAX - 1, table.NextFreeId());
  EXPECT_EQ(INT32_MAX, table.NextFreeId());
  EXPECT_EQ(1, table.NextFreeId());  // 0 is still in flight
  EXPECT_EQ(2, table.NextFreeId());
}

TEST(ClientCallTableTest, ForgettingAGaveUpCallLeavesALaterCallWithTheSameId) {
  ClientCallTable table;
  auto gave_up = std::make_shared<FakeCall>("gave-up");
  auto later = std::make_shared<FakeCall>("later");
  table.AddSent(7, later);
  table.ForgetSent(7, gave_up.get());  // not the call sent with 7
  EXPECT_EQ(1u, table.sent());
  table.ForgetSent(7, later.get());
  EXPECT_EQ(0u, table.sent());
  EXPECT_EQ(nullptr, table.TakeSent(7));
}

TEST(ClientCallTableTest, HeldCallsComeBackInOrderAndTakeAllEmptiesBoth) {
  ClientCallTable table;
  table.Hold(std::make_shared<FakeCall>("p1"));
  table.Hold(std::make_shared<FakeCall>("p2"));
  auto held = table.TakeHeld();
  ASSERT_EQ(2u, held.size());
  EXPECT_EQ("p1", held[0]->Describe());
  EXPECT_EQ("p2", held[1]->Describe());
  EXPECT_TRUE(table.TakeHeld().empty());

  table.Hold(std::make_shared<FakeCall>("waiting"));
  table.AddSent(3, std::make_shared<FakeCall>("sent"));
  auto all = table.TakeAll();
  ASSERT_EQ(2u, all.size());
  EXPECT_EQ("waiting", all[0]->Describe());
  EXPECT_EQ("sent", all[1]->Describe());
  EXPECT_EQ(0u, table.sent());
  EXPECT_TRUE(table.TakeHeld().empty());
  EXPECT_TRUE(table.TakeAll().empty());
}

TEST(ServerCallTableTest, RefusesADuplicateIdWhileInFlightAndPublishesItsSize) {
  std::atomic<size_t> published{0};
  ServerCallTable table(&published);
  InboundCallTrace* trace;
  EXPECT_TRUE(table.Add(5, false, MonoTime(), &trace));
  EXPECT_EQ(nullptr, trace);
  EXPECT_TRUE(table.Add(6, false, MonoTime(), &trace));
  EXPECT_FALSE(table.Add(5, false, MonoTime(), &trace));
  EXPECT_EQ(2u, table.size());
  EXPECT_EQ(2u, published.load());
  table.Remove(5);
  EXPECT_TRUE(table.Add(5, false, MonoTime(), &trace));  // answered: the id may come again
  table.Remove(99);                                      // never added: nothing happens
  EXPECT_EQ(2u, table.size());
  table.Clear();
  EXPECT_TRUE(table.empty());
  EXPECT_EQ(0u, published.load());
}

TEST(ServerCallTableTest, AnAnsweredCallsTraceIsReusedFreshAndAClearedOnesIsNot) {
  std::atomic<size_t> published{0};
  ServerCallTable table(&published);
  const MonoTime t1 = MonoTime::Now();
  InboundCallTrace* first;
  ASSERT_TRUE(table.Add(1, true, t1, &first));
  ASSERT_NE(nullptr, first);
  EXPECT_EQ(t1, first->received);
  static const std::string kMethod = "svc.M";
  first->method.store(&kMethod);
  first->running.store(true);
  int listed = 0;
  table.ForEachTrace([&](const InboundCallTrace& t) {
    ++listed;
    EXPECT_EQ(&kMethod, t.method.load());
  });
  EXPECT_EQ(1, listed);

  table.Remove(1);
  InboundCallTrace* second;
  const MonoTime t2 = t1 + MonoDelta::FromSeconds(1);
  ASSERT_TRUE(table.Add(2, true, t2, &second));
  EXPECT_EQ(first, second);  // reused, not allocated again
  EXPECT_EQ(nullptr, second->method.load());
  EXPECT_FALSE(second->running.load());
  EXPECT_EQ(t2, second->received);

  // A call dropped by Clear may still be on a worker: its trace is not
  // handed to the next call.
  table.Clear();
  InboundCallTrace* third;
  ASSERT_TRUE(table.Add(3, true, t2, &third));
  EXPECT_NE(second, third);
}

}  // namespace
}  // namespace osprey::transport
