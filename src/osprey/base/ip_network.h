// IpNetwork: a block of IPv4 or IPv6 addresses in CIDR notation
// ("10.0.0.0/8", "fd00::/8"), and the blocks of this host's network
// interfaces. What a server's trusted subnets are made of (Kudu's
// --trusted_subnets). A plain value; any thread.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "osprey/base/sockaddr.h"
#include "osprey/base/status.h"

namespace osprey {

class IpNetwork {
 public:
  // "address/length": a dotted IPv4 address with a length from 0 to 32, or
  // an IPv6 address with one from 0 to 128. Bits past the length are
  // dropped, as Kudu does ("10.1.2.3/8" is 10.0.0.0/8). Anything else
  // (no length, a name, spaces, a leading zero or sign in the length) is
  // InvalidArgument naming the text.
  static Status Parse(std::string_view cidr, IpNetwork* out);
  // Each of `cidrs`, in order; the first that does not parse is the error.
  static Status ParseList(const std::vector<std::string>& cidrs, std::vector<IpNetwork>* out);
  // From an interface's address and netmask (getifaddrs): both of one
  // family; the mask's leading ones are the length.
  static IpNetwork FromAddressAndMask(const sockaddr* address, const sockaddr* mask);

  // `addr` is in this block. An IPv4 address mapped into IPv6
  // (::ffff:a.b.c.d, the peer of a dual-stack listener) is read as the
  // IPv4 address it carries. A Unix socket is in no block.
  bool Contains(const Sockaddr& addr) const;
  // "10.0.0.0/8", "fd00::/8".
  std::string ToString() const;
  int family() const { return family_; }
  int length() const { return length_; }

 private:
  int family_ = AF_INET;
  int length_ = 0;
  std::array<uint8_t, 16> bytes_{};  // network byte order; past the length, zeros
};

// `addr` is in one of `networks`.
bool InAnyOf(const std::vector<IpNetwork>& networks, const Sockaddr& addr);

// Kudu's default --trusted_subnets: the private and link-local blocks of
// IPv4 and IPv6, and loopback.
const std::vector<std::string>& KuduDefaultTrustedSubnets();

// The block of each IPv4 and IPv6 address of this host's interfaces that
// are up (of this thread's network namespace), from getifaddrs.
Status LocalIpNetworks(std::vector<IpNetwork>* out);

}  // namespace osprey
