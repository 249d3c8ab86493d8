// Control-socket messages between stokerd and its clients (Unix SOCK_SEQPACKET: one message
// per datagram, connection-oriented, so a closed socket is the liveness signal both ways).
//
// Every message starts with MessageHeader; `magic` and `proto_major` sit at fixed offsets
// forever so that a client of any version can be told which version the daemon speaks.
// The daemon treats everything a client sends as untrusted: wrong size, unknown type,
// a slot it does not hold, or a bad generation evicts that client and nobody else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "stoker/proto/layout.hpp"

namespace stoker::proto {

inline constexpr std::uint32_t kControlMagic = 0x4b4f5453u;  // "STOK"
// 2: the segment travels with the Welcome as a sealed memfd (SCM_RIGHTS) instead of by name,
// so a 1.x client could not map it; status replies may span several messages.
inline constexpr std::uint16_t kProtoMajor = 2;
// 2.1: Hello.reader and Welcome.readers/reader (fan-out: several readers of one rank).
// 2.2: Command (JSON requests: define a job, drain a job) and error kJobDrained.
// 2.3: Release.wait_ns (the trainer's time blocked waiting for that batch), sent only to a
// daemon whose Welcome says 2.3 or later; a 2.3 daemon still takes the 24-byte Release.
// 2.4: Hello.start_position with kHelloStartPosition (elastic resume); a client that asks for
// one checks the Welcome says 2.4 or later (an older daemon ignores it, so it must refuse).
// 2.5: announced batches (issue #36). A Hello with kHelloAnnounce grants a credit window
// (Hello.window): the daemon sends each ready batch of the consumer's (rank, reader) as a
// Batch message unasked, while fewer than `window` announced batches are untaken; a Release
// tells it the batch's announcement was taken, and a Credit (the count taken so far) tells it
// of batches taken but still held. Acquire stays for 2.0..2.4 clients and for `STOKER_ACQUIRE=1`.
inline constexpr std::uint16_t kProtoMinor = 5;
inline constexpr std::uint16_t kStartPositionMinor = 4;  // first minor whose daemon reads start_position
inline constexpr std::uint16_t kAnnounceMinor = 5;       // first minor whose daemon announces batches
inline constexpr std::size_t kMaxMessageBytes = 65536;       // status replies carry JSON
// MessageHeader.reserved of a StatusReply: more StatusReply messages follow with the rest of
// the JSON (a status for thousands of consumers spans several messages). Readers that do not
// know it (protocol 1.1 clients) read the first part only.
inline constexpr std::uint16_t kStatusMoreFollows = 1;

enum class MsgType : std::uint16_t {
  kHello = 1,        // client -> daemon, first message
  kWelcome = 2,      // daemon -> client, hello accepted
  kError = 3,        // daemon -> client, request refused (connection is closed after it)
  kAcquire = 4,      // client -> daemon, "send me my next batch"
  kBatch = 5,        // daemon -> client, a leased slot
  kRelease = 6,      // client -> daemon, give a slot back
  kStatusQuery = 7,  // client -> daemon, no job needed
  kStatusReply = 8,  // daemon -> client, JSON text follows the header
  kDeviceRing = 9,   // daemon -> client, right after Welcome when device output was granted
  kUnmapped = 10,    // client -> daemon, "I closed every device handle of this connection"
  kCommand = 11,     // client -> daemon, JSON request text follows the header (2.2); answered
                     // with StatusReply message(s) holding a JSON reply {"ok": ..., ...}
  kCredit = 12,      // client -> daemon (2.5, announce mode): announcements taken so far
};

struct MessageHeader {
  std::uint32_t magic;        // kControlMagic
  std::uint16_t proto_major;  // kProtoMajor of the sender
  std::uint16_t proto_minor;
  std::uint16_t type;         // MsgType
  std::uint16_t reserved;
  std::uint32_t size;         // bytes of the whole message, header included
};
static_assert(sizeof(MessageHeader) == 16);
static_assert(offsetof(MessageHeader, proto_major) == 4);
static_assert(offsetof(MessageHeader, type) == 8);
static_assert(offsetof(MessageHeader, size) == 12);

// Client flags in Hello.
inline constexpr std::uint32_t kHelloWantDevice = 1u << 0;  // device output through CUDA IPC
// 2.1: `rank` is the launcher's global process index g; for a job with `readers: K` the
// daemon serves it as rank g / K, reader g % K (consecutive processes form a group, as
// tensor-parallel groups are numbered). The Welcome says which rank and reader it got.
inline constexpr std::uint32_t kHelloSplitRank = 1u << 1;
// 2.4: start_position is set: epoch start_epoch begins after the whole world (of whatever
// size it had) consumed start_position positions of its global order; start_batch counts
// this rank's batches of the rest (elastic resume, sampler::rank_samples_from).
inline constexpr std::uint32_t kHelloStartPosition = 1u << 2;
// 2.5: announce mode: the daemon pushes ready batches up to Hello.window ahead (kAnnounceMinor).
inline constexpr std::uint32_t kHelloAnnounce = 1u << 3;

struct HelloMsg {
  MessageHeader header;
  char job[64];                 // NUL-terminated job name
  std::uint32_t rank;
  std::uint32_t flags;          // kHello*
  std::uint64_t start_epoch;    // resume position: first batch the consumer wants
  std::uint64_t start_batch;
  std::uint8_t device_uuid[16]; // GPU UUID when kHelloWantDevice
  std::uint32_t pid;            // for status/logs only
  std::uint32_t device_backend; // device::BackendKind of the client (1 cuda, 2 hostsim)
  std::uint32_t reader;         // 2.1: which of the rank's `readers` this is (0 from 2.0)
  std::uint32_t window;         // 2.5, with kHelloAnnounce: announced batches buffered at most (0 from 2.4)
  std::uint64_t start_position; // 2.4, with kHelloStartPosition: samples consumed by the whole world
  std::uint8_t reserved[16];
};
static_assert(sizeof(HelloMsg) == 160);
static_assert(offsetof(HelloMsg, start_position) == 136);
static_assert(offsetof(HelloMsg, reader) == 128);
static_assert(offsetof(HelloMsg, device_uuid) == 104);
static_assert(offsetof(HelloMsg, device_backend) == 124);

struct WelcomeMsg {
  MessageHeader header;
  char segment_name[96];        // Boost.Interprocess shared_memory_object name
  std::uint64_t segment_size;
  std::uint64_t daemon_generation;
  std::uint32_t ring_index;
  std::uint32_t slot_count;
  std::uint64_t batches_per_epoch;  // nominal count for this rank (len(loader))
  std::uint64_t samples_per_rank;   // per epoch, after padding or dropping
  std::uint32_t readers;            // 2.1: readers of each rank (> 1: batches are shared,
  std::uint32_t reader;             //      mapped read-only); this connection's reader
  std::uint32_t rank;               // 2.1: the global rank served (after kHelloSplitRank)
  std::uint8_t reserved[28];
};
static_assert(sizeof(WelcomeMsg) == 192);
static_assert(offsetof(WelcomeMsg, readers) == 152);

enum class ErrorCode : std::int32_t {
  kOk = 0,
  kBadMessage = 1,
  kVersionMismatch = 2,
  kUnknownJob = 3,
  kBadRank = 4,
  kRankBusy = 5,
  kNoDevice = 6,
  kBadRelease = 7,
  kInternal = 8,
  kJobFailed = 9,
  kTooManyConnections = 10,  // server.max_connections reached, or no descriptor to spare
  kLeaseTimeout = 11,        // the consumer held a batch longer than the job's lease_timeout_s
  kOutOfStep = 12,           // a reader asked for a position its rank's other readers are not at
  kJobDrained = 13,          // the job was drained (reload, stokerctl drain) and nothing more comes (2.2)
  kAccessDenied = 14,        // the peer is not stokerd's user, root, or of server.group (SO_PEERCRED; 2.2)
};

struct ErrorMsg {
  MessageHeader header;
  std::int32_t code;            // ErrorCode
  std::uint32_t reserved;
  char message[488];            // NUL-terminated, human readable
};
static_assert(sizeof(ErrorMsg) == 512);

// Device delivery, per connection: one allocation on the consumer's GPU holds every slot's
// device copy (slot i at i * slot_stride: images, then the labels at labels_offset in the
// segment header's label format), plus two interprocess events per slot: `ready` (recorded by
// stokerd after the slot's copy; the
// consumer's stream waits on it) and `release` (recorded by the consumer on its stream before
// it sends Release; stokerd's copy stream waits on it before overwriting the slot). The
// allocation lives until the consumer said kUnmapped or its process is gone.
struct DeviceRingMsg {
  MessageHeader header;
  std::uint32_t backend;        // device::BackendKind
  std::uint32_t dtype;          // DType of the device images (float when normalized there)
  std::uint64_t alloc_bytes;    // bytes of the allocation behind mem_handle
  std::uint64_t slot_stride;    // device bytes from one slot to the next
  std::uint64_t image_bytes;    // device bytes of one sample
  std::uint64_t labels_offset;  // from a slot's start to its labels (SegmentHeader::label_dtype rows)
  std::uint32_t slot_count;     // == WelcomeMsg::slot_count
  std::uint32_t flags;          // kDeviceNormalized
  std::uint8_t device_uuid[16]; // the GPU the allocation is on
  std::uint8_t mem_handle[64];
  std::uint64_t alloc_id;       // unique within the daemon generation
  std::uint8_t reserved[8];
  // followed by DeviceSlotHandles[slot_count]; header.size covers them
};
static_assert(sizeof(DeviceRingMsg) == 160);
static_assert(offsetof(DeviceRingMsg, mem_handle) == 80);

struct DeviceSlotHandles {
  std::uint8_t ready_event[64];
  std::uint8_t release_event[64];
};
static_assert(sizeof(DeviceSlotHandles) == 128);

inline constexpr std::uint32_t kDeviceNormalized = 1u << 0;  // device images are normalized floats
inline constexpr std::uint32_t kMaxDeviceSlots =
    (kMaxMessageBytes - sizeof(DeviceRingMsg)) / sizeof(DeviceSlotHandles);

// Sent on the consumer's connection before it closes, or - when its batches outlived the
// connection - on a fresh connection from the same process once the last one died.
struct UnmappedMsg {
  MessageHeader header;
  std::uint64_t alloc_id;           // DeviceRingMsg::alloc_id
  std::uint64_t daemon_generation;  // of the daemon that granted it (a restarted one ignores it)
};
static_assert(sizeof(UnmappedMsg) == 32);

struct AcquireMsg {
  MessageHeader header;
};

struct BatchMsg {
  MessageHeader header;
  std::uint32_t slot;           // index within the consumer's ring
  std::uint32_t generation;     // must be echoed in Release
  std::uint64_t epoch;
  std::uint64_t batch_index;
  std::uint32_t count;          // valid samples
  std::uint32_t flags;          // kBatch*
};
static_assert(sizeof(BatchMsg) == 48);

struct ReleaseMsg {
  MessageHeader header;
  std::uint32_t slot;
  std::uint32_t generation;
  // 2.3: nanoseconds the trainer spent blocked in next() until this batch arrived (across
  // timed-out calls too). Untrusted: the daemon clamps it to the connection's age.
  std::uint64_t wait_ns;
};
static_assert(sizeof(ReleaseMsg) == 32);
static_assert(offsetof(ReleaseMsg, wait_ns) == 24);
// The Release of protocol 2.0..2.2 (no wait_ns): still accepted from older clients.
inline constexpr std::size_t kReleaseV21Bytes = 24;
inline constexpr std::uint16_t kReleaseWaitMinor = 3;  // first minor whose daemon takes wait_ns

struct StatusQueryMsg {
  MessageHeader header;
};

// 2.5: how many of this connection's announcements the client has taken (cumulative). Sent
// before the client waits with batches taken but not released, so the window reopens.
// Untrusted: the daemon clamps it to what it announced.
struct CreditMsg {
  MessageHeader header;
  std::uint64_t taken;
};
static_assert(sizeof(CreditMsg) == 24);

template <class Msg>
Msg make_message(MsgType type) {
  Msg m;
  std::memset(&m, 0, sizeof m);
  m.header.magic = kControlMagic;
  m.header.proto_major = kProtoMajor;
  m.header.proto_minor = kProtoMinor;
  m.header.type = static_cast<std::uint16_t>(type);
  m.header.size = static_cast<std::uint32_t>(sizeof(Msg));
  return m;
}

// Copies a string into a fixed char array, always NUL-terminated.
template <std::size_t N>
void copy_cstr(char (&dst)[N], const char* src) {
  std::size_t i = 0;
  for (; src != nullptr && src[i] != '\0' && i + 1 < N; ++i) dst[i] = src[i];
  for (; i < N; ++i) dst[i] = '\0';
}

// Reads a fixed char array that an untrusted peer may not have terminated.
template <std::size_t N>
std::size_t bounded_strlen(const char (&s)[N]) {
  std::size_t i = 0;
  while (i < N && s[i] != '\0') ++i;
  return i;
}

}  // namespace stoker::proto
