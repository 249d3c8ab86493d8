// The remote-worker protocol's constants and the helpers both ends share (proto/stoker/remote/
// worker.proto holds the messages). Versioned like the local protocol: a new optional field is
// a minor bump; anything an older peer would misread is a major bump, refused naming both.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.hpp"

namespace stoker::remote {

inline constexpr std::uint32_t kWorkerMajor = 1;
// 1.1: Result echoes the item's epoch and draw. 1.2: OpenReply names the worker's decoder versions.
// 1.3: a plaintext stream's results may travel on a TCP connection of their own (results_channel.hpp).
// 1.4: the node's items may travel on that connection too.
// 1.5: between a 1.5 node and worker, that connection's results frames carry each result's
// pixels after the message (Result.pixel_bytes), so the node receives them into the ring slot.
// 1.6: Open.compress_when_waiting (remote.compression auto: results compressed only while they
// wait on the connection).
inline constexpr std::uint32_t kWorkerMinor = 6;

// Bounds on what a peer may send (gRPC refuses a larger message before we see it).
inline constexpr std::size_t kMaxRequestBytes = 1u << 20;   // an Open (job YAML) or an Item
inline constexpr std::size_t kMaxJobYamlBytes = 256u << 10;
inline constexpr std::size_t kMaxPathBytes = 4096;
inline constexpr std::uint64_t kMaxSampleBytes = std::uint64_t{1} << 30;  // one finished sample
inline constexpr std::uint64_t kMaxReadBytes = std::uint64_t{1} << 30;    // one encoded sample
inline constexpr std::size_t kMaxInFlight = 1024;  // items a worker holds per stream at most
inline constexpr std::size_t kMaxBatch = 64;        // items in an ItemBatch, results in a ResultBatch
inline constexpr std::size_t kBatchBytes = 4u << 20;  // a worker starts a new ResultBatch past this
// remote.compression auto (worker_stream.hpp): a worker compresses while its writes of results
// take this share of the time or more, or while one has been outstanding this long. A write
// completes once the socket (or gRPC's window) takes it: on a link that keeps up, in well under
// a millisecond, a few percent of the time between writes; on a slower link the writes run back
// to back, and one that waits 20 ms has a full socket buffer behind it.
inline constexpr double kLinkBusyToCompress = 0.8;
inline constexpr std::chrono::milliseconds kLinkWaitToCompress{20};
// A worker makes no more of a stream's items while this many bytes of its results wait unread
// (or two samples per decode thread, if more): a node that stops reading parks its stream
// (issue #34, A3; worker_stream.hpp).
inline constexpr std::size_t kStreamBufferBytes = 8u << 20;

// A worker's answer bigger than this is refused by the GPU node: a finished sample, compressed
// or not, plus the message's own fields.
inline std::size_t max_reply_bytes(std::uint64_t sample_bytes) {
  const std::uint64_t one = sample_bytes + sample_bytes / 64 + (64u << 10);
  // A ResultBatch holds results until it passes kBatchBytes, so at most that plus one more.
  const std::uint64_t batch = std::min<std::uint64_t>(kMaxBatch * one, kBatchBytes + one);
  return static_cast<std::size_t>(std::min<std::uint64_t>(batch, std::uint64_t{1} << 31) - 1);
}

// "worker protocol A.B" vs "B.C": empty when the majors agree, else the refusal.
std::string version_mismatch(std::uint32_t their_major, std::uint32_t their_minor, const char* their_side);

// Constant-time comparison of a presented token with the expected one (no early exit on the
// first differing byte, so the time says nothing about how much of a guess was right).
bool token_equal(std::string_view presented, std::string_view expected);

// zstd at a fast level (the link, not the CPU, is what compression is for).
void compress(std::span<const std::uint8_t> in, std::string& out);
// Exactly `expected` bytes into `out`, or an error (a corrupt frame, or another size).
base::Status decompress(std::string_view in, std::span<std::uint8_t> out);

// Reads a whole file, or `size` bytes at `offset` (a tar member), refusing more than
// kMaxReadBytes. errno-style failures come back with the path and strerror.
// The same from a descriptor already opened (a regular file is checked again); `name` is for
// messages. The worker reads items this way, from base::confined_open.
base::Status read_fd(int fd, const std::string& name, bool member, std::uint64_t offset, std::uint64_t size,
                     std::vector<std::uint8_t>& out);
base::Status read_bytes(const std::string& path, bool member, std::uint64_t offset, std::uint64_t size,
                        std::vector<std::uint8_t>& out);

}  // namespace stoker::remote
