#include "control/peer_access.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <grp.h>
#include <pwd.h>
#include <stdexcept>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log/log.hpp"

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
  if (peer.uid == policy.owner) return {true, "owner", {}};
  if (peer.uid == 0) return {true, "root", {}};
  if (policy.group) {
    const gid_t g = *policy.group;
    if (peer.gid == g || std::find(supplementary.begin(), supplementary.end(), g) != supplementary.end()) {
      return {true, "member of group " + policy.group_name, {}};
    }
    return {false, "access denied: uid " + std::to_string(peer.uid) + " is neither stokerd's user (uid " +
                       std::to_string(policy.owner) + "), root, nor a member of group '" + policy.group_name +
                       "' (server.group); ask for membership of '" + policy.group_name +
                       "' and start a new login session",
            {}};
  }
  return {false, "access denied: uid " + std::to_string(peer.uid) + " is not stokerd's user (uid " +
                     std::to_string(policy.owner) +
                     ") or root, and the config sets no server.group to let other users in",
          {}};
}

namespace {

std::vector<gid_t> database_groups(uid_t uid, gid_t gid) {
  const std::string name = user_name(uid);
  if (name.empty()) return {};
  int n = 64;
  std::vector<gid_t> groups(static_cast<std::size_t>(n));
  if (::getgrouplist(name.c_str(), gid, groups.data(), &n) < 0) {
    groups.resize(static_cast<std::size_t>(n));
    if (::getgrouplist(name.c_str(), gid, groups.data(), &n) < 0) return {};
  }
  groups.resize(static_cast<std::size_t>(n));
  return groups;
}

}  // namespace

std::optional<PeerCredentials> read_peer_credentials(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof cred) return std::nullopt;
  PeerCredentials peer{cred.pid, cred.uid, cred.gid, {}};
  std::vector<gid_t> groups(64);
  for (;;) {
    socklen_t glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen) == 0) {
      groups.resize(glen / sizeof(gid_t));
      peer.groups = std::move(groups);
      return peer;
    }
    if (errno == ERANGE && glen > groups.size() * sizeof(gid_t) && glen <= 65536 * sizeof(gid_t)) {
      groups.resize(glen / sizeof(gid_t));  // the kernel said how many
      continue;
    }
    if (errno == ENOPROTOOPT) {
      peer.groups = database_groups(peer.uid, peer.gid);
      return peer;
    }
    return std::nullopt;
  }
}

std::string describe_peer(const PeerCredentials& peer) {
  return "pid " + std::to_string(peer.pid) + ", uid " + id_with_name(peer.uid, user_name(peer.uid)) + ", gid " +
         id_with_name(peer.gid, group_name(peer.gid));
}

PeerVerdict PeerGate::admit(int fd) {
  const std::optional<PeerCredentials> read = read_peer_credentials(fd);
  if (!read) {
    stoker::log::warn("refusing a connection whose credentials cannot be read (SO_PEERCRED/SO_PEERGROUPS: {})",
                      std::strerror(errno));
    return {false, "access denied: stokerd cannot read this connection's credentials", {}};
  }
  const PeerCredentials& peer = *read;
  PeerVerdict v = decide_peer_access(policy_, peer, peer.groups);
  v.peer = peer;
  if (v.allowed) {
    const bool first = seen_.emplace(peer.uid, true).second;
    if (first) {
      stoker::log::info("connection from {} admitted ({}); later ones of this uid are logged at debug",
                        describe_peer(peer), v.why);
    } else {
      stoker::log::debug("connection from {} admitted ({})", describe_peer(peer), v.why);
    }
    return v;
  }
  const auto now = std::chrono::steady_clock::now();
  auto [it, fresh] = last_refusal_log_.emplace(peer.uid, now);
  if (fresh || now - it->second > std::chrono::seconds(10)) {
    it->second = now;
    stoker::log::warn("connection from {} refused: {}", describe_peer(peer), v.why);
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
    stoker::log::warn(
        "members of group '{}' cannot reach {}: its folder {} is mode {:04o}, group {}; give the folder to "
        "the group with mode 0750 (systemd: RuntimeDirectoryMode=0750 and Group=)",
        policy.group_name, socket_path, dir.string(), st.st_mode & 07777, st.st_gid);
  }
}

}  // namespace stoker::control
