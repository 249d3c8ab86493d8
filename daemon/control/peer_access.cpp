#include "control/peer_access.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <grp.h>
#include <pwd.h>
#include <sstream>
#include <stdexcept>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

namespace stoker::control {
namespace {

std::string user_name(uid_t uid) {
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr) return found->pw_name;
  return {};
}

std::string group_name(gid_t gid) {
  std::vector<char> buf(16384);
  group gr{};
  group* found = nullptr;
  if (::getgrgid_r(gid, &gr, buf.data(), buf.size(), &found) == 0 && found != nullptr) return found->gr_name;
  return {};
}

std::string id_with_name(unsigned id, const std::string& name) {
  return name.empty() ? std::to_string(id) : std::to_string(id) + " (" + name + ")";
}

}  // namespace

PeerVerdict decide_peer_access(const PeerPolicy& policy, const PeerCredentials& peer,
                               const std::vector<gid_t>& supplementary) {
  if (peer.uid == policy.owner) return {true, "owner"};
  if (peer.uid == 0) return {true, "root"};
  if (policy.group) {
    const gid_t g = *policy.group;
    if (peer.gid == g || std::find(supplementary.begin(), supplementary.end(), g) != supplementary.end()) {
      return {true, "member of group " + policy.group_name};
    }
    return {false, "access denied: uid " + std::to_string(peer.uid) + " is neither stokerd's user (uid " +
                       std::to_string(policy.owner) + "), root, nor a member of group '" + policy.group_name +
                       "' (server.group); ask for membership of '" + policy.group_name +
                       "' and start a new login session"};
  }
  return {false, "access denied: uid " + std::to_string(peer.uid) + " is not stokerd's user (uid " +
                     std::to_string(policy.owner) +
                     ") or root, and the config sets no server.group to let other users in"};
}

std::optional<std::vector<gid_t>> parse_status_groups(std::string_view text) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    const std::size_t end = std::min(text.find('\n', pos), text.size());
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.substr(0, 7) != "Groups:") continue;
    std::vector<gid_t> out;
    line.remove_prefix(7);
    while (!line.empty()) {
      const std::size_t start = line.find_first_not_of(" \t");
      if (start == std::string_view::npos) break;
      line.remove_prefix(start);
      unsigned long g = 0;
      const auto [p, ec] = std::from_chars(line.data(), line.data() + line.size(), g);
      if (ec != std::errc() || g > 0xffffffffull) return std::nullopt;  // not the kernel's format
      out.push_back(static_cast<gid_t>(g));
      line.remove_prefix(static_cast<std::size_t>(p - line.data()));
    }
    return out;
  }
  return std::nullopt;
}

std::vector<gid_t> peer_groups(const PeerCredentials& peer) {
  if (peer.pid > 0) {
    std::ifstream f("/proc/" + std::to_string(peer.pid) + "/status");
    if (f) {
      std::stringstream ss;
      ss << f.rdbuf();
      if (auto g = parse_status_groups(ss.str())) return *g;
    }
  }
  const std::string name = user_name(peer.uid);
  if (name.empty()) return {};
  int n = 64;
  std::vector<gid_t> groups(static_cast<std::size_t>(n));
  if (::getgrouplist(name.c_str(), peer.gid, groups.data(), &n) < 0) {
    groups.resize(static_cast<std::size_t>(n));
    if (::getgrouplist(name.c_str(), peer.gid, groups.data(), &n) < 0) return {};
  }
  groups.resize(static_cast<std::size_t>(n));
  return groups;
}

std::string describe_peer(const PeerCredentials& peer) {
  return "pid " + std::to_string(peer.pid) + ", uid " + id_with_name(peer.uid, user_name(peer.uid)) + ", gid " +
         id_with_name(peer.gid, group_name(peer.gid));
}

PeerVerdict PeerGate::admit(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof cred) {
    spdlog::warn("refusing a connection whose credentials cannot be read (SO_PEERCRED: {})", std::strerror(errno));
    return {false, "access denied: stokerd cannot read this connection's credentials"};
  }
  const PeerCredentials peer{cred.pid, cred.uid, cred.gid};
  // Supplementary groups matter only for a peer that is neither the owner nor root.
  const bool need_groups = policy_.group && peer.uid != policy_.owner && peer.uid != 0 && peer.gid != *policy_.group;
  PeerVerdict v = decide_peer_access(policy_, peer, need_groups ? peer_groups(peer) : std::vector<gid_t>{});
  if (v.allowed) {
    const bool first = seen_.emplace(peer.uid, true).second;
    if (first) {
      spdlog::info("connection from {} admitted ({}); later ones of this uid are logged at debug", describe_peer(peer),
                   v.why);
    } else {
      spdlog::debug("connection from {} admitted ({})", describe_peer(peer), v.why);
    }
    return v;
  }
  const auto now = std::chrono::steady_clock::now();
  auto [it, fresh] = last_refusal_log_.emplace(peer.uid, now);
  if (fresh || now - it->second > std::chrono::seconds(10)) {
    it->second = now;
    spdlog::warn("connection from {} refused: {}", describe_peer(peer), v.why);
  }
  return v;
}

void apply_socket_access(const std::string& socket_path, const PeerPolicy& policy) {
  if (!policy.group) return;  // bound 0600: owner (and root) only
  const gid_t g = *policy.group;
  if (::chown(socket_path.c_str(), static_cast<uid_t>(-1), g) != 0) {
    throw std::runtime_error("cannot give the control socket " + socket_path + " to group '" + policy.group_name +
                             "' (server.group): " + std::strerror(errno) +
                             "; stokerd must run as root or as a member of that group");
  }
  if (::chmod(socket_path.c_str(), 0660) != 0) {
    throw std::runtime_error("cannot make the control socket " + socket_path + " mode 0660: " + std::strerror(errno));
  }
  const auto dir = std::filesystem::path(socket_path).parent_path();
  if (dir.empty()) return;
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return;
  if (st.st_uid == ::geteuid() && (st.st_mode & 07777) == 0700 && dir.filename().string().rfind("stoker", 0) == 0) {
    // A private stoker folder (the defaults .../stoker and /tmp/stoker-<uid>, made 0700 by
    // instance_lock.cpp, or systemd's RuntimeDirectory=stoker): let the group through. Other
    // folders (a home directory) are the user's to open, never widened here.
    if (::chown(dir.c_str(), static_cast<uid_t>(-1), g) == 0) ::chmod(dir.c_str(), 0750);
    if (::stat(dir.c_str(), &st) != 0) return;
  }
  const bool group_passes = (st.st_gid == g && (st.st_mode & S_IXGRP)) || (st.st_mode & S_IXOTH);
  if (!group_passes) {
    spdlog::warn("members of group '{}' cannot reach {}: its folder {} is mode {:04o}, group {}; give the folder to "
                 "the group with mode 0750 (systemd: RuntimeDirectoryMode=0750 and Group=)",
                 policy.group_name, socket_path, dir.string(), st.st_mode & 07777, st.st_gid);
  }
}

}  // namespace stoker::control
