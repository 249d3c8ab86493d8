// Reading a sample's bytes, with the failure told apart where it happens (ARCHITECTURE.md,
// "three kinds of failure"): the job sees bytes or a verdict, never an errno.
//  - transient: the machine, not the file (EMFILE, ENFILE, ENOMEM, EAGAIN, EINTR, EIO, ENOBUFS,
//    ETIMEDOUT, ESTALE, a short read): retry later; never blame the sample.
//  - missing: the file is not there or not ours to read now (ENOENT, EACCES, EPERM, ENOTDIR,
//    EISDIR, ...): skip it this epoch, look again next epoch.
// Content failures (bytes that do not decode) are the decoder's verdict, not this layer's.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace stoker::source {

enum class ReadStatus : std::uint8_t { kOk, kTransient, kMissing };

struct ReadResult {
  ReadStatus status = ReadStatus::kOk;
  int error = 0;       // errno of the failing call (0 for a short read)
  std::string reason;  // "cannot open: Too many open files"
  bool ok() const { return status == ReadStatus::kOk; }
};

// Whether a failing call's errno is a fault of the machine rather than of the file.
bool is_transient_errno(int e);

// Reads the whole file into `out` (resized to its size). A file that is shorter than fstat
// said when the read ends is a transient failure (being replaced, or a network file system's
// hiccup): reading it again is the cure.
ReadResult read_file(const std::string& path, std::vector<std::uint8_t>& out);

// Reads `size` bytes at `offset` of `path` (a tar member) into `out`, with pread on a
// descriptor opened for this read only, so descriptor use stays one per read in flight. A
// file now shorter than offset + size is missing, not transient: the shard changed since it
// was indexed (restart to re-index it), and retrying will not bring the bytes back.
ReadResult read_range(const std::string& path, std::uint64_t offset, std::uint64_t size,
                      std::vector<std::uint8_t>& out);

// read_range on a descriptor the caller keeps open (a cached shard): the same size check
// (fstat on every read, so a shard truncated in place is still missing) and the same verdicts.
ReadResult read_range_at(int fd, std::uint64_t offset, std::uint64_t size, std::vector<std::uint8_t>& out);

// open(O_RDONLY | O_CLOEXEC), retried on EINTR; on failure returns -1 with `failed` set to
// the verdict (transient or missing) read_file would give.
int open_for_read(const std::string& path, ReadResult& failed);

}  // namespace stoker::source
