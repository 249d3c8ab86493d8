// Who may talk to stokerd: the user it runs as, root, and — when the config names a
// `server.group` — the members of that group.
//
// Two layers, both needed:
//  - the file system: the socket is 0600 (owner only) by default, 0660 owned by the group when
//    one is set, and its folder must let the group through (apply_socket_access);
//  - the kernel's word on who connected (SO_PEERCRED: pid, uid, gid at connect time), checked on
//    every accepted connection (PeerGate::admit). This catches what the file mode cannot: a
//    socket or folder whose mode someone widened, a descriptor of the listening socket handed
//    to another process, a path reached through another mount namespace.
//
// A connection's segments follow from its admission: they are unnamed memfds sent over the
// admitted connection (job/shm_segment.hpp), so nobody who was refused here can map one.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace stoker::control {

struct PeerPolicy {
  uid_t owner = 0;               // the daemon's effective uid
  std::optional<gid_t> group;    // server.group's gid; empty: owner and root only
  std::string group_name;        // for messages
};

// Who is at the other end of a connection, as the kernel said when it was accepted
// (SO_PEERCRED, SO_PEERGROUPS): taken once, kept with the session, never read again from /proc
// (a pid is reused; a process's groups change). Issue #34, D1.
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups = {};  // supplementary, at connect (SO_PEERGROUPS)
};

struct PeerVerdict {
  bool allowed = false;
  std::string why;  // allowed: "owner", "root", "member of group G"; refused: the client's message
  PeerCredentials peer;  // what the decision was made on (kept by the session when allowed)
};

// The decision alone, from the credentials and the peer's supplementary groups (pure; tested
// without processes).
PeerVerdict decide_peer_access(const PeerPolicy& policy, const PeerCredentials& peer,
                               const std::vector<gid_t>& supplementary);

// The credentials of a connected Unix socket's peer, read once: SO_PEERCRED (pid, uid, gid) and
// SO_PEERGROUPS (its supplementary groups when it connected). A kernel without SO_PEERGROUPS
// (before 4.13): the group database's list for the uid (getgrouplist), never /proc/PID.
std::optional<PeerCredentials> read_peer_credentials(int fd);

// Checks every accepted connection and logs who connected: the first connection of each uid
// at info, later ones at debug; refusals at warn, at most once per 10 s per uid.
class PeerGate {
 public:
  explicit PeerGate(PeerPolicy policy) : policy_(std::move(policy)) {}
  // Reads the credentials of an accepted socket (read_peer_credentials) and decides; the verdict
  // carries them for the session. A socket whose credentials cannot be read is refused.
  PeerVerdict admit(int fd);
  const PeerPolicy& policy() const { return policy_; }

 private:
  PeerPolicy policy_;
  std::map<uid_t, bool> seen_;  // uids admitted before (logged once at info)
  std::map<uid_t, std::chrono::steady_clock::time_point> last_refusal_log_;
};

// Gives the socket file its group and mode 0660 when the policy has a group (else leaves the
// 0600 it was bound with), and makes sure the group can reach it: a folder named stoker* owned
// by the daemon with mode 0700 (the default folders stokerd makes, systemd's RuntimeDirectory)
// becomes 0750 and the group's; any other folder is left alone, with a warning when the group
// cannot pass through it. Throws
// std::runtime_error naming the path when the socket cannot be given to the group.
void apply_socket_access(const std::string& socket_path, const PeerPolicy& policy);

// "pid 123, uid 1000 (alice), gid 1000 (alice)": for log lines.
std::string describe_peer(const PeerCredentials& peer);

}  // namespace stoker::control
