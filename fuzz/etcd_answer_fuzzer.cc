// What a client of etcd decodes from it (etcd_answers.h), fed arbitrary
// bytes in arbitrary pieces: a watch stream split into messages, each
// applied to a table of servers; the whole input as a range answer, as a
// lease answer, as an authentication's token, and as base64. It must never
// crash, leak, hang or throw (the watcher's thread would end the process),
// and each bound must hold: no line buffered past its bound, no more
// servers than the table's, revisions from 0 to below INT64_MAX, addresses
// sorted and each once, a lease's fields not negative, a token one
// header's visible ASCII, base64 decoded back to what encodes to it.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "osprey/base/base64.h"
#include "osprey/rpc/etcd_answers.h"

using osprey::Base64Decode;
using osprey::Base64Encode;
using osprey::EtcdLineSplitter;
using osprey::EtcdServerTable;

static void Check(bool ok, const char* what) {
  if (!ok) {
    fprintf(stderr, "invariant broken: %s\n", what);
    abort();
  }
}

static void CheckTable(const EtcdServerTable& t, size_t max_servers) {
  Check(t.size() <= max_servers, "no more servers than the bound");
  Check(t.revision() >= 0 && t.revision() < INT64_MAX, "revision in range");
  const auto a = t.Addresses();
  Check(a.size() <= t.size(), "no more addresses than keys");
  for (size_t i = 1; i < a.size(); ++i) Check(a[i - 1] < a[i], "addresses sorted, each once");
  for (const auto& s : a) Check(!s.empty(), "no empty address");
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // The first byte sets the piece size, so that messages split anywhere.
  const size_t piece = 1 + data[0] % 64;
  const std::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);
  constexpr size_t kMaxLine = 4096, kMaxServers = 8;

  EtcdServerTable table("/svc", kMaxServers);
  EtcdLineSplitter lines(kMaxLine);
  for (size_t off = 0; off < in.size(); off += piece) {
    const auto r = lines.Feed(in.substr(off, piece), [&](std::string_view m) {
      Check(!m.empty() && m.size() <= kMaxLine, "a line within its bound");
      Check(m.find('\n') == std::string_view::npos, "a line without its newline");
      osprey::EtcdWatchStep step = table.ApplyWatchMessage(m);
      Check((step.next == osprey::EtcdWatchStep::Next::kContinue) == step.why.empty(),
            "a watch that ends says why");
      CheckTable(table, kMaxServers);
      return true;
    });
    Check(lines.buffered() <= kMaxLine, "buffered within the bound");
    if (r == EtcdLineSplitter::Result::kTooLong) break;
  }

  EtcdServerTable range("/svc", kMaxServers);
  const osprey::Status s = range.LoadRange(in);
  Check(s.ok() || s.IsCorruption(), "a range answer parses or is Corruption");
  CheckTable(range, kMaxServers);

  osprey::EtcdLease lease;
  const osprey::Status ls = osprey::ParseEtcdLease(in, &lease);
  Check(ls.ok() || ls.IsCorruption(), "a lease answer parses or is Corruption");
  Check(lease.id >= 0 && lease.ttl_seconds >= 0, "a lease's fields not negative");

  std::string token = "unchanged";
  const osprey::Status ts = osprey::ParseEtcdToken(in, &token);
  Check(ts.ok() || ts.IsCorruption(), "a token answer parses or is Corruption");
  if (ts.ok()) {
    Check(!token.empty() && token.size() <= osprey::kMaxEtcdTokenBytes, "a token within its bound");
    for (char c : token) Check(c > 0x20 && c < 0x7f, "a token that is one header value");
  } else {
    Check(token == "unchanged", "a refused token is not kept");
  }

  std::string decoded;
  if (Base64Decode(in, &decoded)) {
    std::string again;
    Check(Base64Decode(Base64Encode(decoded), &again) && again == decoded, "base64 decodes back");
  }
  return 0;
}
