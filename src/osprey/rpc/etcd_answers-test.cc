// etcd's answers decoded, cell by cell: the watch stream split into
// messages with its bound, and each answer or message applied to the table
// of servers with its bound. What a lying etcd does to a whole watcher is in
// tests/hostile-etcd-test.cc.
#include "osprey/rpc/etcd_answers.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "osprey/base/base64.h"

namespace osprey {
namespace {

struct Lines {
  std::vector<std::string> got;
  bool stop_after_first = false;
  std::function<bool(std::string_view)> fn() {
    return [this](std::string_view l) {
      got.emplace_back(l);
      return !stop_after_first;
    };
  }
};

TEST(EtcdLineSplitterTest, HandsOverEachWholeLineWhereverTheReadsCutIt) {
  EtcdLineSplitter split(100);
  Lines lines;
  using R = EtcdLineSplitter::Result;
  EXPECT_EQ(R::kMore, split.Feed("{\"a\"", lines.fn()));
  EXPECT_EQ(4u, split.buffered());
  EXPECT_EQ(R::kMore, split.Feed(":1}\n{\"b\":2}\n\n{", lines.fn()));
  EXPECT_EQ((std::vector<std::string>{"{\"a\":1}", "{\"b\":2}"}), lines.got);
  EXPECT_EQ(1u, split.buffered());
  EXPECT_EQ(R::kMore, split.Feed("}\n", lines.fn()));
  EXPECT_EQ("{}", lines.got.back());
  EXPECT_EQ(0u, split.buffered());
}

TEST(EtcdLineSplitterTest, ALineAtTheBoundPassesAndOneByteMoreEndsTheStream) {
  using R = EtcdLineSplitter::Result;
  {
    EtcdLineSplitter split(10);
    Lines lines;
    EXPECT_EQ(R::kMore, split.Feed("01234", lines.fn()));
    EXPECT_EQ(R::kMore, split.Feed("56789\n", lines.fn()));
    EXPECT_EQ(std::vector<std::string>{"0123456789"}, lines.got);
  }
  {  // growing across reads
    EtcdLineSplitter split(10);
    Lines lines;
    EXPECT_EQ(R::kMore, split.Feed("0123456789", lines.fn()));
    EXPECT_EQ(R::kTooLong, split.Feed("a", lines.fn()));
    EXPECT_EQ(0u, split.buffered());
    EXPECT_TRUE(lines.got.empty());
  }
  {  // whole in one read, newline and all
    EtcdLineSplitter split(10);
    Lines lines;
    EXPECT_EQ(R::kTooLong, split.Feed("ok\n0123456789a\nnever\n", lines.fn()));
    EXPECT_EQ(std::vector<std::string>{"ok"}, lines.got);
  }
  {  // a flood never holds more than the bound
    EtcdLineSplitter split(1000);
    Lines lines;
    const std::string piece(64, 'x');
    R r = R::kMore;
    size_t most = 0;
    for (int i = 0; i < 100 && r == R::kMore; ++i) {
      r = split.Feed(piece, lines.fn());
      most = std::max(most, split.buffered());
    }
    EXPECT_EQ(R::kTooLong, r);
    EXPECT_LE(most, 1000u);
  }
}

TEST(EtcdLineSplitterTest, TheRestIsTakenWhole) {
  EtcdLineSplitter split(100);
  Lines lines;
  EXPECT_EQ(EtcdLineSplitter::Result::kMore, split.Feed("{\"a\":1}\n{\"error\"", lines.fn()));
  EXPECT_EQ(std::vector<std::string>{"{\"a\":1}"}, lines.got);
  EXPECT_EQ("{\"error\"", split.TakeRest());
  EXPECT_EQ(0u, split.buffered());
  EXPECT_EQ("", split.TakeRest());
}

TEST(EtcdLineSplitterTest, StopsWhereTheReaderSaysSo) {
  EtcdLineSplitter split(100);
  Lines lines;
  lines.stop_after_first = true;
  EXPECT_EQ(EtcdLineSplitter::Result::kStopped, split.Feed("a\nb\nc\n", lines.fn()));
  EXPECT_EQ(std::vector<std::string>{"a"}, lines.got);
}

// A kv as the gateway writes it.
std::string Kv(const std::string& key, const std::string& value, const std::string& revision) {
  return R"({"key":")" + Base64Encode(key) + R"(","value":")" + Base64Encode(value) +
         R"(","mod_revision":")" + revision + R"("})";
}
std::string Put(const std::string& key, const std::string& value, const std::string& revision) {
  return R"({"type":"PUT","kv":)" + Kv(key, value, revision) + "}";
}
std::string Delete(const std::string& key, const std::string& revision) {
  return R"({"type":"DELETE","kv":{"key":")" + Base64Encode(key) + R"(","mod_revision":")" +
         revision + R"("}})";
}
std::string Events(const std::string& events) {
  return R"({"result":{"header":{"revision":"9"},"events":[)" + events + "]}}";
}

TEST(EtcdServerTableTest, ARangeAnswerSetsTheServersAndTheRevision) {
  EtcdServerTable t("/svc");
  ASSERT_TRUE(t.LoadRange(R"({"header":{"revision":"42"},"kvs":[)" +
                          Kv("/svc/a", R"({"address":"10.0.0.1:7051","pid":1})", "40") + "," +
                          Kv("/svc/10.0.0.2:7051", "written by hand", "41") + "," +
                          Kv("/svc/c", R"({"address":"10.0.0.1:7051"})", "41") + "]}")
                  .ok());
  EXPECT_EQ((std::vector<std::string>{"10.0.0.1:7051", "10.0.0.2:7051"}), t.Addresses());
  EXPECT_EQ(3u, t.size());
  EXPECT_EQ(42, t.revision());
  // An empty prefix: no kvs at all.
  ASSERT_TRUE(t.LoadRange(R"({"header":{"revision":"43"}})").ok());
  EXPECT_EQ(0u, t.size());
  EXPECT_EQ(43, t.revision());
}

TEST(EtcdServerTableTest, AnAnswerThatIsNotJsonChangesNothing) {
  EtcdServerTable t("/svc");
  ASSERT_TRUE(t.LoadRange(R"({"header":{"revision":"5"},"kvs":[)" +
                          Kv("/svc/a", R"({"address":"h:1"})", "5") + "]}")
                  .ok());
  for (const char* bad : {"", "[]", "{\"kvs\":", "<html>502</html>", "\"a\""}) {
    Status s = t.LoadRange(bad);
    EXPECT_TRUE(s.IsCorruption()) << bad << ": " << s.ToString();
    EXPECT_EQ(std::vector<std::string>{"h:1"}, t.Addresses());
    EXPECT_EQ(5, t.revision());
  }
}

TEST(EtcdServerTableTest, KeysThatAreNotBase64OrNameNothingAreSkipped) {
  EtcdServerTable t("/svc");
  ASSERT_TRUE(t.LoadRange(R"({"kvs":[{"key":"not base64!","value":""},{"key":7},"a kv?",)" +
                          Kv("/svc/", "{}", "1") + "," + Kv("/svc/b", R"({"address":"h:2"})", "1") +
                          "]}")
                  .ok());
  EXPECT_EQ(std::vector<std::string>{"h:2"}, t.Addresses());
}

TEST(EtcdServerTableTest, WatchEventsPutAndDeleteAndMoveTheRevision) {
  EtcdServerTable t("/svc");
  ASSERT_TRUE(t.LoadRange(R"({"header":{"revision":"5"}})").ok());
  EtcdWatchStep step =
      t.ApplyWatchMessage(R"({"result":{"header":{"revision":"5"},"created":true}})");
  EXPECT_EQ(EtcdWatchStep::Next::kContinue, step.next);
  EXPECT_TRUE(step.created);
  EXPECT_FALSE(step.changed);
  step = t.ApplyWatchMessage(Events(Put("/svc/a", R"({"address":"h:1"})", "6") + "," +
                                    Put("/svc/b", R"({"address":"h:2"})", "7")));
  EXPECT_EQ(EtcdWatchStep::Next::kContinue, step.next);
  EXPECT_TRUE(step.changed);
  EXPECT_FALSE(step.created);
  EXPECT_EQ((std::vector<std::string>{"h:1", "h:2"}), t.Addresses());
  EXPECT_EQ(7, t.revision());
  // The same address again (a lease renewed by a put): no change to publish.
  step = t.ApplyWatchMessage(Events(Put("/svc/a", R"({"address":"h:1","pid":2})", "8")));
  EXPECT_FALSE(step.changed);
  EXPECT_EQ(8, t.revision());
  step = t.ApplyWatchMessage(Events(Delete("/svc/a", "9")));
  EXPECT_TRUE(step.changed);
  EXPECT_EQ(std::vector<std::string>{"h:2"}, t.Addresses());
  // Deleting what is not there.
  step = t.ApplyWatchMessage(Events(Delete("/svc/zz", "10")));
  EXPECT_FALSE(step.changed);
  EXPECT_EQ(10, t.revision());
  // A progress notice: no events.
  step = t.ApplyWatchMessage(R"({"result":{"header":{"revision":"11"}}})");
  EXPECT_EQ(EtcdWatchStep::Next::kContinue, step.next);
  EXPECT_FALSE(step.changed);
}

TEST(EtcdServerTableTest, WhatEndsAWatchAndWhatMakesItReadEverythingAgain) {
  EtcdServerTable t("/svc");
  using N = EtcdWatchStep::Next;
  struct Cell {
    const char* message;
    N next;
  };
  const Cell cells[] = {
      {R"({"result":{"compact_revision":"3"}})", N::kReadAgain},
      {"not json", N::kReadAgain},
      {"[1,2]", N::kReadAgain},
      {R"({"error":{"grpc_code":14,"message":"etcdserver: no leader"}})", N::kWatchAgain},
      {R"({"result":{"canceled":true,"cancel_reason":"lease gone"}})", N::kWatchAgain},
      {R"({"result":{"canceled":"yes"}})", N::kContinue},
      {R"({"result":"odd"})", N::kContinue},
      {R"({"result":{"events":"odd"}})", N::kContinue},
      {R"({"result":{"events":[1,{"kv":2},{"kv":{}}]}})", N::kContinue},
  };
  for (const Cell& c : cells) {
    EtcdWatchStep step = t.ApplyWatchMessage(c.message);
    EXPECT_EQ(c.next, step.next) << c.message;
    EXPECT_EQ(c.next != N::kContinue, !step.why.empty()) << c.message;
    EXPECT_FALSE(step.changed) << c.message;
  }
}

// An etcd replaced by an empty one (or restored from an older snapshot)
// answers from revisions before the ones this table saw: the watch is
// read again, not left waiting for revisions that history has not reached.
TEST(EtcdServerTableTest, AHeaderBeforeTheRevisionSeenMakesItReadEverythingAgain) {
  using N = EtcdWatchStep::Next;
  EtcdServerTable t("/svc");
  ASSERT_TRUE(t.LoadRange(R"({"header":{"revision":"40"}})").ok());
  struct Cell {
    const char* message;
    N next;
  };
  const Cell cells[] = {
      {R"({"result":{"header":{"revision":"40"},"created":true}})", N::kContinue},
      {R"({"result":{"header":{"revision":"41"}}})", N::kContinue},
      {R"({"result":{"header":{}}})", N::kContinue},                // no revision: not known
      {R"({"result":{"header":{"revision":"x"}}})", N::kContinue},  // not a number
      {R"({"result":{"header":{"revision":"39"}}})", N::kReadAgain},
      {R"({"result":{"header":{"revision":"3"},"created":true}})", N::kReadAgain},
  };
  for (const Cell& c : cells) {
    EtcdWatchStep step = t.ApplyWatchMessage(c.message);
    EXPECT_EQ(c.next, step.next) << c.message;
    EXPECT_EQ(40, t.revision()) << c.message;
  }
  EtcdWatchStep step = t.ApplyWatchMessage(R"({"result":{"header":{"revision":"3"}}})");
  EXPECT_NE(std::string::npos, step.why.find("etcd is at revision 3, before the 40")) << step.why;
  // Read again, the new etcd's revision is the table's, and its watch goes on.
  ASSERT_TRUE(t.LoadRange(R"({"header":{"revision":"3"}})").ok());
  EXPECT_EQ(3, t.revision());
  EXPECT_EQ(N::kContinue,
            t.ApplyWatchMessage(R"({"result":{"header":{"revision":"3"},"created":true}})").next);
}

TEST(EtcdServerTableTest, RevisionsOutsideZeroToBelowInt64MaxAreIgnored) {
  EtcdServerTable t("/svc");
  ASSERT_TRUE(t.LoadRange(R"({"header":{"revision":"9223372036854775807"}})").ok());
  EXPECT_EQ(0, t.revision());  // so that the next revision, one more, is one too
  ASSERT_TRUE(t.LoadRange(R"({"header":{"revision":"9223372036854775806"}})").ok());
  EXPECT_EQ(INT64_MAX - 1, t.revision());
  for (const char* bad : {"-1", "1e3", "12abc", "", "99999999999999999999", " 5"}) {
    ASSERT_TRUE(t.LoadRange(std::string(R"({"header":{"revision":")") + bad + "\"}}").ok());
    EXPECT_EQ(0, t.revision()) << bad;
  }
  ASSERT_TRUE(t.LoadRange(R"({"header":{"revision":18446744073709551615}})").ok());
  EXPECT_EQ(0, t.revision());
  ASSERT_TRUE(t.LoadRange(R"({"header":{"revision":17}})").ok());
  EXPECT_EQ(17, t.revision());
  t.ApplyWatchMessage(Events(Put("/svc/a", R"({"address":"h:1"})", "9223372036854775807")));
  EXPECT_EQ(17, t.revision());
}

TEST(EtcdLeaseTest, GrantAndKeepAliveAnswersAreRead) {
  EtcdLease lease;
  ASSERT_TRUE(ParseEtcdLease(R"({"header":{},"ID":"7587","TTL":"5"})", &lease).ok());
  EXPECT_EQ(7587, lease.id);
  EXPECT_EQ(5, lease.ttl_seconds);
  ASSERT_TRUE(ParseEtcdLease(R"({"result":{"ID":"7587","TTL":"4"}})", &lease).ok());
  EXPECT_EQ(4, lease.ttl_seconds);
  // etcd no longer has it: no TTL.
  ASSERT_TRUE(ParseEtcdLease(R"({"result":{"ID":"7587"}})", &lease).ok());
  EXPECT_EQ(0, lease.ttl_seconds);
  // Negative, past int64, or not numbers: 0; up to INT64_MAX, as etcd said.
  ASSERT_TRUE(ParseEtcdLease(R"({"ID":"-3","TTL":"9223372036854775807"})", &lease).ok());
  EXPECT_EQ(0, lease.id);
  EXPECT_EQ(INT64_MAX, lease.ttl_seconds);
  ASSERT_TRUE(ParseEtcdLease(R"({"ID":"9223372036854775808","TTL":" 5"})", &lease).ok());
  EXPECT_EQ(0, lease.id);
  EXPECT_EQ(0, lease.ttl_seconds);
  ASSERT_TRUE(ParseEtcdLease(R"({"result":"odd","ID":true})", &lease).ok());
  EXPECT_EQ(0, lease.id);
  EXPECT_TRUE(ParseEtcdLease("<html>", &lease).IsCorruption());
}

TEST(EtcdServerTableTest, PastTheBoundNewKeysAreCountedNotKeptUntilDeletionsMakeRoom) {
  EtcdServerTable t("/svc", /*max_servers=*/2);
  ASSERT_TRUE(t.LoadRange(R"({"kvs":[)" + Kv("/svc/a", R"({"address":"h:1"})", "1") + "," +
                          Kv("/svc/b", R"({"address":"h:2"})", "1") + "," +
                          Kv("/svc/c", R"({"address":"h:3"})", "1") + "]}")
                  .ok());
  EXPECT_EQ((std::vector<std::string>{"h:1", "h:2"}), t.Addresses());
  EXPECT_EQ(1, t.refused());
  // Full: a new key is refused, a known one still moves.
  EtcdWatchStep step = t.ApplyWatchMessage(Events(Put("/svc/d", R"({"address":"h:4"})", "2") + "," +
                                                  Put("/svc/b", R"({"address":"h:5"})", "2")));
  EXPECT_TRUE(step.changed);
  EXPECT_EQ((std::vector<std::string>{"h:1", "h:5"}), t.Addresses());
  EXPECT_EQ(2, t.refused());
  step = t.ApplyWatchMessage(
      Events(Delete("/svc/a", "3") + "," + Put("/svc/d", R"({"address":"h:4"})", "3")));
  EXPECT_EQ((std::vector<std::string>{"h:4", "h:5"}), t.Addresses());
  EXPECT_EQ(2u, t.size());
}

// etcd's answer to /v3/auth/authenticate, and what a lying one might send
// instead: the token goes into a header, so only visible ASCII is taken.
TEST(EtcdTokenTest, AGoodTokenIsTakenAndAnythingThatCouldBreakAHeaderIsNot) {
  std::string token;
  ASSERT_TRUE(
      ParseEtcdToken(R"({"header":{"revision":"1"},"token":"PWMpirJYEbfPNbfB.12"})", &token).ok());
  EXPECT_EQ("PWMpirJYEbfPNbfB.12", token);
  const std::string jwt = "eyJhbGciOiJSUzI1NiJ9." + std::string(600, 'x') + ".sig-_";
  ASSERT_TRUE(ParseEtcdToken(R"({"token":")" + jwt + R"("})", &token).ok());
  EXPECT_EQ(jwt, token);
  for (const std::string& bad : std::vector<std::string>{
           R"({"token":""})", R"({"token":5})", R"({})", R"("token")", "<html>",
           R"({"token":"a\r\nX-Injected: 1"})", R"({"token":"a b"})", R"({"token":"caf\u00e9"})",
           R"({"token":"a\u0000b"})",
           R"({"token":")" + std::string(kMaxEtcdTokenBytes + 1, 'a') + R"("})"}) {
    token = "kept";
    Status s = ParseEtcdToken(bad, &token);
    EXPECT_TRUE(s.IsCorruption()) << bad.substr(0, 60) << ": " << s.ToString();
    EXPECT_EQ("kept", token) << bad.substr(0, 60);
    EXPECT_EQ(std::string::npos, s.ToString().find("X-Injected")) << "the message echoes the token";
  }
  ASSERT_TRUE(
      ParseEtcdToken(R"({"token":")" + std::string(kMaxEtcdTokenBytes, 'a') + R"("})", &token)
          .ok());
}

TEST(EtcdServerTableTest, AWatchCanceledForItsTokenSaysSoAndNoOtherDoes) {
  EtcdServerTable t("/svc");
  EtcdWatchStep step = t.ApplyWatchMessage(
      R"({"result":{"header":{"revision":"1"},"watch_id":"-1","created":true,"canceled":true,)"
      R"("cancel_reason":"rpc error: code = Unauthenticated desc = etcdserver: invalid auth token"}})");
  EXPECT_EQ(EtcdWatchStep::Next::kWatchAgain, step.next);
  EXPECT_TRUE(step.unauthenticated);
  EXPECT_FALSE(step.created) << "a watch created and canceled at once is not established";
  step = t.ApplyWatchMessage(
      R"({"result":{"watch_id":"-1","created":true,"canceled":true,)"
      R"("cancel_reason":"rpc error: code = PermissionDenied desc = etcdserver: permission denied"}})");
  EXPECT_EQ(EtcdWatchStep::Next::kWatchAgain, step.next);
  EXPECT_FALSE(step.unauthenticated);
  EXPECT_NE(std::string::npos, step.why.find("permission denied")) << step.why;
}

}  // namespace
}  // namespace osprey
