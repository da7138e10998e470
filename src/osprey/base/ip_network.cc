#include "osprey/base/ip_network.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <cerrno>
#include <cstring>

namespace osprey {

namespace {

// The address bytes of `a` and their count (4 or 16); 0 for a Unix socket.
// An IPv4-mapped IPv6 address gives its IPv4 bytes.
size_t AddressBytes(const sockaddr* a, uint8_t bytes[16]) {
  if (a->sa_family == AF_INET) {
    std::memcpy(bytes, &reinterpret_cast<const sockaddr_in*>(a)->sin_addr, 4);
    return 4;
  }
  if (a->sa_family == AF_INET6) {
    const in6_addr& in6 = reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&in6)) {
      std::memcpy(bytes, in6.s6_addr + 12, 4);
      return 4;
    }
    std::memcpy(bytes, in6.s6_addr, 16);
    return 16;
  }
  return 0;
}

void ClearPastLength(std::array<uint8_t, 16>* bytes, int length) {
  for (int i = 0; i < 16; ++i) {
    int keep = length - 8 * i;
    if (keep >= 8) continue;
    (*bytes)[i] &= keep <= 0 ? 0 : static_cast<uint8_t>(0xff << (8 - keep));
  }
}

}  // namespace

Status IpNetwork::Parse(std::string_view cidr, IpNetwork* out) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("trusted subnet '" + std::string(cidr) + "': " + why);
  };
  size_t slash = cidr.find('/');
  if (slash == std::string_view::npos) {
    return bad("not in CIDR notation (address/length, such as 10.0.0.0/8)");
  }
  std::string address(cidr.substr(0, slash));
  std::string_view length_text = cidr.substr(slash + 1);
  if (length_text.empty() || length_text.size() > 3 ||
      (length_text.size() > 1 && length_text[0] == '0')) {
    return bad("the length after '/' must be a number from 0 to 32 (IPv4) or 128 (IPv6)");
  }
  int length = 0;
  for (char c : length_text) {
    if (c < '0' || c > '9') {
      return bad("the length after '/' must be a number from 0 to 32 (IPv4) or 128 (IPv6)");
    }
    length = length * 10 + (c - '0');
  }
  IpNetwork n;
  if (inet_pton(AF_INET, address.c_str(), n.bytes_.data()) == 1) {
    n.family_ = AF_INET;
    if (length > 32) return bad("an IPv4 block's length is at most 32");
  } else if (inet_pton(AF_INET6, address.c_str(), n.bytes_.data()) == 1) {
    n.family_ = AF_INET6;
    if (length > 128) return bad("an IPv6 block's length is at most 128");
  } else {
    return bad("'" + address + "' is not an IPv4 or IPv6 address");
  }
  n.length_ = length;
  ClearPastLength(&n.bytes_, length);
  *out = n;
  return Status::OK();
}

Status IpNetwork::ParseList(const std::vector<std::string>& cidrs, std::vector<IpNetwork>* out) {
  std::vector<IpNetwork> parsed;
  parsed.reserve(cidrs.size());
  for (const std::string& c : cidrs) {
    IpNetwork n;
    OSPREY_RETURN_NOT_OK(Parse(c, &n));
    parsed.push_back(n);
  }
  *out = std::move(parsed);
  return Status::OK();
}

IpNetwork IpNetwork::FromAddressAndMask(const sockaddr* address, const sockaddr* mask) {
  // An interface's own address: never an IPv4-mapped one, so its bytes
  // and its mask's are of one size.
  IpNetwork n;
  n.family_ = address->sa_family == AF_INET ? AF_INET : AF_INET6;
  const size_t size = n.family_ == AF_INET ? 4 : 16;
  auto raw = [&](const sockaddr* a) -> const void* {
    if (a->sa_family == AF_INET) return &reinterpret_cast<const sockaddr_in*>(a)->sin_addr;
    return reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr.s6_addr;
  };
  std::memcpy(n.bytes_.data(), raw(address), size);
  uint8_t mask_bytes[16] = {};
  if (mask != nullptr && mask->sa_family == address->sa_family) {
    std::memcpy(mask_bytes, raw(mask), size);
  }
  int length = 0;
  for (size_t i = 0; i < size && mask_bytes[i] == 0xff; ++i) length += 8;
  if (length < static_cast<int>(8 * size)) {
    for (uint8_t b = mask_bytes[length / 8]; b & 0x80; b = static_cast<uint8_t>(b << 1)) ++length;
  }
  n.length_ = length;
  ClearPastLength(&n.bytes_, length);
  return n;
}

bool IpNetwork::Contains(const Sockaddr& addr) const {
  uint8_t bytes[16];
  size_t size = AddressBytes(addr.addr(), bytes);
  if (size != (family_ == AF_INET ? 4u : 16u)) return false;
  int whole = length_ / 8;
  if (std::memcmp(bytes, bytes_.data(), whole) != 0) return false;
  int rest = length_ % 8;
  if (rest == 0) return true;
  uint8_t mask = static_cast<uint8_t>(0xff << (8 - rest));
  return (bytes[whole] & mask) == bytes_[whole];
}

std::string IpNetwork::ToString() const {
  char text[INET6_ADDRSTRLEN] = {0};
  inet_ntop(family_, bytes_.data(), text, sizeof(text));
  return std::string(text) + "/" + std::to_string(length_);
}

bool InAnyOf(const std::vector<IpNetwork>& networks, const Sockaddr& addr) {
  for (const IpNetwork& n : networks) {
    if (n.Contains(addr)) return true;
  }
  return false;
}

const std::vector<std::string>& KuduDefaultTrustedSubnets() {
  static const std::vector<std::string> kDefault = {
      "127.0.0.0/8",    "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
      "169.254.0.0/16", "::1/128",    "fe80::/10",     "fd00::/8"};
  return kDefault;
}

Status LocalIpNetworks(std::vector<IpNetwork>* out) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    return Status::IOError(std::string("getifaddrs: ") + std::strerror(errno));
  }
  std::vector<IpNetwork> found;
  for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || (i->ifa_flags & IFF_UP) == 0) continue;
    int family = i->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    found.push_back(IpNetwork::FromAddressAndMask(i->ifa_addr, i->ifa_netmask));
  }
  freeifaddrs(list);
  *out = std::move(found);
  return Status::OK();
}

}  // namespace osprey
