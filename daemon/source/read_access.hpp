// Reading a client-defined job's files only where the client's user could read them.
//
// stokerd may run as root (or as a user who can read more than its clients); a job that a
// user of server.group defines (server.client_jobs_for_group) must not let that user see
// what they could not open themselves: the names in a folder (the `samples` command, error
// texts), the lines of a file list, a file's pixels. So every file and folder such a job
// opens is checked, on the descriptor stokerd opened, against the peer's credentials from
// SO_PEERCRED (uid, gid, supplementary groups): the file or folder's own mode bits grant
// what is needed, and every folder on the way to its real path (read from /proc/self/fd)
// lets the user pass. Checking the opened descriptor (not a path checked before opening)
// leaves no window in which a swapped symlink changes what is read.
//
// Why a check and not opening as the user (setfsuid): that needs root and per-thread
// credentials in a worker pool shared by all jobs; a daemon running as an ordinary user
// needs the check all the same (a group member must not read its user's private files).
// Why not a list of allowed roots alone: a user who can write inside an allowed root can
// plant a symlink out of it. Limits, documented in configs/README.md: the mode bits
// are checked, not POSIX ACLs or LSM policy (an ACL that grants more than the mode is
// not honoured: the user gets a refusal naming the path; one that takes away what the mode
// grants is not seen).
#pragma once

#include <string>
#include <sys/stat.h>
#include <sys/types.h>
#include <vector>

#include "base/status.hpp"

namespace stoker::source {

// The user whose permissions a job's reads are checked against.
struct ReadAs {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary
};

// What an access needs: R for a file's bytes, R and X to list a folder, X to pass one.
inline constexpr int kMayRead = 4;
inline constexpr int kMayPass = 1;

// Whether the mode bits of `st` grant all of `want` to `as`, choosing the class as the kernel
// does: the owner's bits for the owner, else the group's for a member of the file's group,
// else the others' bits. uid 0 may read and pass anything. Pure: tested without files.
bool mode_grants(const struct stat& st, const ReadAs& as, int want);

// "" when `as` may read what `fd` is open on (a folder: list it; anything else: read it) and
// may pass every folder above its real path; otherwise why not, without naming anything
// the user could not see ("not readable by uid 1000 (the file itself or a folder above
// it)"). `fd` is any descriptor stokerd opened (O_RDONLY, O_DIRECTORY, or a DIR's dirfd).
std::string check_readable_fd(int fd, const ReadAs& as);

// Opens `path` read-only (O_CLOEXEC | O_NONBLOCK, plus O_DIRECTORY when `directory`) with
// base::confined_open from "/": each folder on the way (and each symlink's target) is checked
// for `as` on the descriptor the walk holds, then the file itself; only a regular file (or a
// folder) is opened to read, so a FIFO or device swapped in after any look is never opened
// (issue #34, D2). Returns the descriptor (the caller closes it), or
// why not: the same text whether the path is missing or refused, so a refusal tells nothing
// about what a folder the user cannot read holds.
base::Result<int> open_checked(const std::string& path, const ReadAs& as, bool directory);

}  // namespace stoker::source
