// connection-setup-bench: connections set up per second, by how they
// authenticate: SASL PLAIN, PLAIN over TLS, PLAIN over TLS that only
// authenticates (loopback without rpc_encrypt_loopback), Kerberos
// (GSSAPI), and Kerberos over TLS; and TCP connections the server accepts
// and the client closes at once, as Kudu's RpcAcceptorBench makes them
// (connect, close with SO_LINGER 0; counted by the server's
// osprey_connections_accepted_total). rpc-bench keeps its connections for a
// whole run, so it cannot show this cost. Each negotiated connection is
// made by one call (an Add) from a client messenger of its own round, to an
// in-process server on loopback; Kerberos uses a real MIT KDC on loopback
// (tests/mini_kdc.h), so it needs Debian's krb5-kdc, krb5-admin-server and
// krb5-user.
//
//   connection-setup-bench [CONNECTIONS_PER_ROUND=200] [ROUNDS=5]
//
// The variants alternate round by round (so that a noisy machine hurts
// them alike); it prints each round and the median connections per second
// of each variant.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "mini_kdc.h"
#include "rpc_test_util.h"

using namespace osprey;
using namespace osprey::rpc_test;

namespace {

struct Variant {
  const char* name;
  bool kerberos;
  bool tls;
  bool tls_auth_only = false;  // TLS on loopback, not encrypting
  bool tcp_only = false;       // connect and close: no negotiation
};

MessengerBuilder Configure(MessengerBuilder b, const Variant& v) {
  if (v.kerberos) b.set_rpc_authentication(RpcAuthentication::kRequired);
  // TLS on loopback only authenticates unless loopback is encrypted, as
  // between hosts.
  if (v.tls) b.set_rpc_encryption(RpcEncryption::kRequired).set_rpc_encrypt_loopback(true);
  if (v.tls_auth_only) b.set_rpc_encryption(RpcEncryption::kRequired);
  b.set_sasl_protocol_name("osprey");
  return b;
}

double AcceptedSoFar(const std::shared_ptr<Messenger>& m) {
  for (const MetricValue& v : m->metrics()->Snapshot()) {
    if (v.name == "osprey_connections_accepted_total") return v.value;
  }
  return 0;
}

// Accepted connections per second for `n` connects, each closed at once
// with a reset, until the server has accepted them all.
double TcpRound(const TestServer& server, int n) {
  const double before = AcceptedSoFar(server.messenger);
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    linger l{1, 0};
    if (fd < 0 || ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l)) != 0 ||
        ::connect(fd, server.address.addr(), server.address.addrlen()) != 0) {
      std::perror("connection-setup-bench: connect");
      std::exit(1);
    }
    ::close(fd);
  }
  while (AcceptedSoFar(server.messenger) < before + n) {
    if (std::chrono::steady_clock::now() - start > std::chrono::seconds(30)) {
      std::fprintf(stderr, "connection-setup-bench: the server accepted too few connections\n");
      std::exit(1);
    }
    std::this_thread::yield();
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return n / secs;
}

// Connections per second for `n` new connections, one call each.
double Round(const Variant& v, const Sockaddr& server, int n) {
  std::shared_ptr<Messenger> client;
  Status s = Configure(MessengerBuilder("setup-client"), v).set_num_reactors(1).Build(&client);
  if (!s.ok()) {
    std::fprintf(stderr, "connection-setup-bench: client: %s\n", s.ToString().c_str());
    std::exit(1);
  }
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    CalculatorServiceProxy proxy(client, server);
    proxy.set_user("user-" + std::to_string(i));  // a connection of its own
    s = CheckedAdd(proxy, static_cast<uint32_t>(i), 1);
    if (!s.ok()) {
      std::fprintf(stderr, "connection-setup-bench: %s: %s\n", v.name, s.ToString().c_str());
      std::exit(1);
    }
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  client->Shutdown();
  return n / secs;
}

}  // namespace

int main(int argc, char** argv) {
  int n = argc > 1 ? std::atoi(argv[1]) : 200;
  int rounds = argc > 2 ? std::atoi(argv[2]) : 5;
  if (n <= 0 || n > 5000 || rounds <= 0 || rounds > 100) {
    std::fprintf(stderr, "usage: connection-setup-bench [CONNECTIONS 1..5000] [ROUNDS 1..100]\n");
    return 2;
  }
  std::unique_ptr<test::MiniKdc> kdc;
  Status s = test::MiniKdc::Start(&kdc);
  if (s.ok()) s = kdc->AddPrincipalWithKeytab("osprey/127.0.0.1", "server.keytab");
  if (s.ok()) s = kdc->AddPrincipalWithKeytab("alice", "alice.keytab");
  if (s.ok()) s = kdc->Kinit("alice", "alice.keytab");
  if (!s.ok()) {
    std::fprintf(stderr, "connection-setup-bench: KDC: %s\n", s.ToString().c_str());
    return 1;
  }
  const Variant variants[] = {
      {"PLAIN", false, false},
      {"PLAIN over TLS", false, true},
      {"TLS auth-only", false, false, /*tls_auth_only=*/true},
      {"GSSAPI", true, false},
      {"GSSAPI over TLS", true, true},
      {"TCP accept only", false, false, false, /*tcp_only=*/true},
  };
  constexpr int kVariants = sizeof(variants) / sizeof(variants[0]);
  std::vector<TestServer> servers(kVariants);
  for (int i = 0; i < kVariants; ++i) {
    MessengerBuilder b = Configure(MessengerBuilder("setup-server"), variants[i]);
    if (variants[i].kerberos) {
      b.set_keytab_file(kdc->Path("server.keytab")).set_principal("osprey/127.0.0.1");
    }
    b.set_metrics(variants[i].tcp_only);  // it counts accepted connections
    s = servers[i].Start(1, ServicePoolOptions(), b);
    if (!s.ok()) {
      std::fprintf(stderr, "connection-setup-bench: server: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  std::vector<std::vector<double>> rates(kVariants);
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < kVariants; ++k) {
      int i = (r % 2 == 0) ? k : kVariants - 1 - k;  // ABCD DCBA ...
      double rate = variants[i].tcp_only ? TcpRound(servers[i], n)
                                         : Round(variants[i], servers[i].address, n);
      rates[i].push_back(rate);
      std::printf("round %d  %-16s %8.0f connections/s\n", r + 1, variants[i].name, rate);
    }
  }
  std::printf("\nmedian of %d rounds of %d connections, each set up by one call:\n", rounds, n);
  for (int i = 0; i < kVariants; ++i) {
    std::sort(rates[i].begin(), rates[i].end());
    double median = rates[i][rates[i].size() / 2];
    std::printf(
        "  %-16s %8.0f connections/s  (%.2f of PLAIN)\n", variants[i].name, median, median / [&] {
          std::vector<double> p = rates[0];
          return p[p.size() / 2];
        }());
  }
  for (auto& srv : servers) srv.messenger->Shutdown();
  return 0;
}
