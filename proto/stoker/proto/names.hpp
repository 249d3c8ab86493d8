// Names both sides derive the same way: the control socket path and shared-memory names.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <unistd.h>

namespace stoker::proto {

// Socket path precedence: explicit (--socket / client argument), then the config's
// `server.socket` (daemon only), then $STOKER_SOCKET, then $XDG_RUNTIME_DIR/stoker/stoker.sock,
// then /run/stoker/stoker.sock for root, else /tmp/stoker-<uid>/stoker.sock.
inline std::string default_socket_path() {
  if (const char* s = std::getenv("STOKER_SOCKET"); s != nullptr && *s != '\0') return s;
  if (const char* x = std::getenv("XDG_RUNTIME_DIR"); x != nullptr && *x != '\0')
    return std::string(x) + "/stoker/stoker.sock";
  if (::geteuid() == 0) return "/run/stoker/stoker.sock";
  return "/tmp/stoker-" + std::to_string(::geteuid()) + "/stoker.sock";
}

inline std::string resolve_socket_path(std::string_view explicit_path,
                                       std::string_view config_path = {}) {
  if (!explicit_path.empty()) return std::string(explicit_path);
  if (!config_path.empty()) return std::string(config_path);
  return default_socket_path();
}

// FNV-1a; stable across builds so names survive a daemon restart (stale cleanup).
constexpr std::uint64_t fnv1a64(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}

// One segment per (daemon instance, job). The instance is the socket path, so two daemons
// on two sockets (e.g. parallel tests) never share a name. Job names are restricted by the
// config to [A-Za-z0-9_.-]{1,48}, so the result fits WelcomeMsg::segment_name.
inline std::string segment_name(std::string_view socket_path, std::string_view job) {
  static const char* kHex = "0123456789abcdef";
  std::uint64_t h = fnv1a64(socket_path);
  std::string hex(16, '0');
  for (int i = 15; i >= 0; --i, h >>= 4) hex[i] = kHex[h & 15];
  return "stoker-" + hex + "-" + std::string(job);
}

}  // namespace stoker::proto
