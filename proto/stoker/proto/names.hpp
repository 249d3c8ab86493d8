// Names both sides derive the same way: the control socket path and shared-memory names.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace stoker::proto {

// Socket path precedence.
//
// Where a daemon creates its socket: explicit (--socket), then the config's `server.socket`,
// then $STOKER_SOCKET, then $XDG_RUNTIME_DIR/stoker/stoker.sock, then /run/stoker/stoker.sock
// for root, else /tmp/stoker-<uid>/stoker.sock.
//
// Where a client looks: explicit (client argument, --socket), then $STOKER_SOCKET, then the
// first of these that exists as a socket: $XDG_RUNTIME_DIR/stoker/stoker.sock,
// /run/stoker/stoker.sock (for every user: the systemd unit's socket, reachable by members of
// its server.group), /tmp/stoker-<uid>/stoker.sock; when none exists, where this user's own
// daemon would be (so the "no stokerd at ..." error names the path a default start would use).
// The daemon's rule is not "first that exists": a daemon creates its socket, it does not find one.
inline constexpr const char* kSystemSocketPath = "/run/stoker/stoker.sock";

inline std::string env_or_empty(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

// Candidates in the order above, for a given environment and effective uid (testable without
// touching the process's environment). `stoker_socket` non-empty wins alone.
inline std::vector<std::string> socket_candidates(const std::string& stoker_socket, const std::string& xdg_runtime_dir,
                                                  unsigned euid) {
  if (!stoker_socket.empty()) return {stoker_socket};
  std::vector<std::string> out;
  if (!xdg_runtime_dir.empty()) out.push_back(xdg_runtime_dir + "/stoker/stoker.sock");
  out.push_back(kSystemSocketPath);
  if (euid != 0) out.push_back("/tmp/stoker-" + std::to_string(euid) + "/stoker.sock");
  return out;
}

// Where a daemon started by this user with no --socket and no server.socket listens.
inline std::string daemon_socket_path_for(const std::string& stoker_socket, const std::string& xdg_runtime_dir,
                                          unsigned euid) {
  if (!stoker_socket.empty()) return stoker_socket;
  if (!xdg_runtime_dir.empty()) return xdg_runtime_dir + "/stoker/stoker.sock";
  if (euid == 0) return kSystemSocketPath;
  return "/tmp/stoker-" + std::to_string(euid) + "/stoker.sock";
}

inline bool is_socket_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

// The first candidate that exists as a socket, else the daemon's default for this user.
inline std::string client_socket_path_for(const std::string& stoker_socket, const std::string& xdg_runtime_dir,
                                          unsigned euid) {
  if (!stoker_socket.empty()) return stoker_socket;
  for (const auto& c : socket_candidates(stoker_socket, xdg_runtime_dir, euid)) {
    if (is_socket_file(c)) return c;
  }
  return daemon_socket_path_for(stoker_socket, xdg_runtime_dir, euid);
}

inline std::string default_socket_path() {
  return daemon_socket_path_for(env_or_empty("STOKER_SOCKET"), env_or_empty("XDG_RUNTIME_DIR"), ::geteuid());
}

// The daemon: explicit, then config, then default_socket_path().
inline std::string resolve_socket_path(std::string_view explicit_path,
                                       std::string_view config_path = {}) {
  if (!explicit_path.empty()) return std::string(explicit_path);
  if (!config_path.empty()) return std::string(config_path);
  return default_socket_path();
}

// A client: explicit, then the first existing candidate (see above).
inline std::string resolve_client_socket_path(std::string_view explicit_path) {
  if (!explicit_path.empty()) return std::string(explicit_path);
  return client_socket_path_for(env_or_empty("STOKER_SOCKET"), env_or_empty("XDG_RUNTIME_DIR"), ::geteuid());
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
