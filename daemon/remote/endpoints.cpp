#include "remote/endpoints.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

namespace stoker::remote {

std::pair<std::string, std::string> split_address(const std::string& a) {
  const std::size_t colon = a.rfind(':');
  std::string host = a.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  return {host, a.substr(colon + 1)};
}

Endpoints resolve_workers(const std::vector<std::string>& addresses) {
  Endpoints out;
  for (const std::string& a : addresses) {
    const auto [host, port] = split_address(a);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || res == nullptr) {
      out.unresolved.insert(a);
      continue;
    }
    for (addrinfo* p = res; p != nullptr; p = p->ai_next) {
      char ip[INET6_ADDRSTRLEN] = {};
      const void* addr = p->ai_family == AF_INET ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(p->ai_addr)->sin_addr)
                                                 : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(p->ai_addr)->sin6_addr);
      if (inet_ntop(p->ai_family, addr, ip, sizeof ip) == nullptr) continue;
      const bool v6 = p->ai_family == AF_INET6;
      const std::string endpoint = v6 ? "[" + std::string(ip) + "]:" + port : std::string(ip) + ":" + port;
      out.endpoints.emplace(endpoint, std::make_pair(a, (v6 ? "ipv6:" : "ipv4:") + endpoint));
    }
    freeaddrinfo(res);
  }
  return out;
}

}  // namespace stoker::remote
