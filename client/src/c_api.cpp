// The C API: every entry point converts failures to a status + thread-local message.
// No exception crosses this boundary.
#include <cstdlib>
#include <chrono>
#include <thread>
#include <algorithm>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>
#include <sys/socket.h>
#include <unistd.h>

#include "connection.hpp"
#include "stoker/proto/names.hpp"
#include "stoker/stoker.h"

using stoker::client::BatchView;
using stoker::client::Connection;
using stoker::client::Failure;

struct stoker_client {
  std::shared_ptr<Connection> conn;
  // What a reconnect needs (reconnect_timeout_ms > 0): the same request, at the position the
  // stream stands (the batch after the last one handed out).
  std::string socket, job;
  std::uint32_t rank = 0;
  std::uint32_t reader = 0;
  int device_ordinal = -1;
  bool writable = false;
  int reconnect_timeout_ms = 0;
  std::uint64_t next_epoch = 0, next_batch = 0;
  // Elastic resume: epoch start_epoch is the rest after start_position samples; a reconnect
  // within that epoch asks for the same rest (its batch numbers count that rest's batches).
  std::uint64_t start_epoch = 0, start_position = 0;
  std::uint64_t position_for(std::uint64_t epoch) const { return epoch == start_epoch ? start_position : 0; }
};

struct stoker_batch {
  std::shared_ptr<Connection> conn;
  BatchView view;
  bool acquired = false;                     // device: ordered on `stream`, reads begun
  stoker::device::StreamId stream = 0;
};

namespace {

thread_local std::string g_last_error;

stoker_status fail(stoker_status s, std::string msg) {
  g_last_error = std::move(msg);
  return s;
}

template <class F>
stoker_status guarded(F&& f) {
  try {
    return f();
  } catch (const Failure& e) {
    return fail(e.status, e.message);
  } catch (const std::bad_alloc&) {
    return fail(STOKER_ERR_INTERNAL, "out of memory");
  } catch (const std::exception& e) {
    return fail(STOKER_ERR_INTERNAL, e.what());
  } catch (...) {
    return fail(STOKER_ERR_INTERNAL, "unknown error");
  }
}

// "cuda" / "cuda:N" -> ordinal; NULL or "" -> -1 (host batches).
int parse_device(const char* device, int want_device) {
  std::string d = device != nullptr ? device : "";
  if (d.empty() && want_device != 0) d = "cuda";
  if (d.empty()) return -1;
  if (d == "cuda") {
    const char* lr = std::getenv("LOCAL_RANK");
    if (lr == nullptr || *lr == '\0') return 0;
    char* end = nullptr;
    const long v = std::strtol(lr, &end, 10);
    if (*end != '\0' || v < 0 || v > 1023) {
      throw Failure{STOKER_ERR_INVALID_ARGUMENT, std::string("LOCAL_RANK='") + lr + "' is not a GPU index"};
    }
    return static_cast<int>(v);
  }
  if (d.rfind("cuda:", 0) == 0 && d.size() > 5) {
    char* end = nullptr;
    const long v = std::strtol(d.c_str() + 5, &end, 10);
    if (*end == '\0' && v >= 0 && v <= 1023) return static_cast<int>(v);
  }
  throw Failure{STOKER_ERR_INVALID_ARGUMENT, "device '" + d + "' is not \"cuda\" or \"cuda:N\""};
}

// Orders the batch on `stream` the first time it is asked for on the device.
void acquire_on_device(stoker_batch* b, stoker::device::StreamId stream) {
  auto* dev = b->conn->device();
  if (dev == nullptr || !b->view.on_device) {
    throw Failure{STOKER_ERR_INVALID_ARGUMENT,
                  dev == nullptr ? "this client receives host batches (open it with options.device)"
                                 : "this batch has no device copy (stokerd could not copy it; see its log)"};
  }
  if (b->acquired) {
    // Another stream wants it too: order it as well; the fence stays on the first.
    if (stream != b->stream) {
      if (stoker::base::Status s = dev->wait_copied(b->view.slot, stream); !s) {
        throw Failure{STOKER_ERR_INTERNAL, "device wait: " + s.message()};
      }
    }
    return;
  }
  if (stoker::base::Status s = dev->acquire(b->view.slot, stream); !s) {
    throw Failure{STOKER_ERR_INTERNAL, "device wait: " + s.message()};
  }
  b->acquired = true;
  b->stream = stream;
}

// The daemon went away under a client with reconnect_timeout_ms: wait for one on the same
// socket and attach at the stream's position, so the caller sees exactly the batches an
// uninterrupted run gives. Batches still held from the old daemon keep their mapping (their
// own shared_ptr to the old Connection). Past the timeout, `lost` is rethrown.
void reconnect(stoker_client& c, const Failure& lost) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::milliseconds(c.reconnect_timeout_ms);
  std::string last = lost.message;
  while (clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    try {
      c.conn = std::make_shared<Connection>(c.socket, c.job, c.rank, c.reader, c.next_epoch, c.next_batch, c.device_ordinal,
                                            c.writable, false, c.position_for(c.next_epoch));
      return;
    } catch (const Failure& f) {
      // No daemon yet, or the old one's rank not released yet: keep waiting. Anything else
      // (a job that is gone from the new config, a version mismatch) is final.
      if (f.status != STOKER_ERR_NO_DAEMON && f.status != STOKER_ERR_DISCONNECTED &&
          f.status != STOKER_ERR_REFUSED) {
        throw;
      }
      last = f.message;
    }
  }
  throw Failure{STOKER_ERR_DISCONNECTED, lost.message + "; no daemon came back within " +
                                             std::to_string(c.reconnect_timeout_ms) + " ms (" + last + ")"};
}

}  // namespace

extern "C" {

void stoker_options_init(stoker_options* o) {
  if (o != nullptr) std::memset(o, 0, sizeof *o);
}

stoker_status stoker_client_open(const stoker_options* o, stoker_client** out) {
  if (o == nullptr || out == nullptr || o->job == nullptr) {
    return fail(STOKER_ERR_INVALID_ARGUMENT, "stoker_client_open: options, job and out are required");
  }
  *out = nullptr;
  return guarded([&] {
    const std::string socket = stoker::proto::resolve_client_socket_path(o->socket_path ? o->socket_path : "");
    auto c = std::make_unique<stoker_client>();
    c->socket = socket;
    c->job = o->job;
    c->rank = o->rank;
    c->reader = o->reader;
    c->device_ordinal = parse_device(o->device, o->want_device);
    c->writable = o->map_writable != 0;
    c->reconnect_timeout_ms = std::max(0, o->reconnect_timeout_ms);
    c->next_epoch = o->start_epoch;
    c->next_batch = o->start_batch;
    c->start_epoch = o->start_epoch;
    c->start_position = o->start_position;
    c->conn = std::make_shared<Connection>(socket, o->job, o->rank, o->reader, o->start_epoch, o->start_batch,
                                           c->device_ordinal, c->writable, o->split_rank != 0, o->start_position);
    // A reconnect asks for the rank and reader this connection was given.
    c->rank = c->conn->info().rank;
    c->reader = c->conn->info().reader;
    *out = c.release();
    return STOKER_OK;
  });
}

void stoker_client_close(stoker_client* c) {
  if (c == nullptr) return;
  c->conn->close();
  delete c;
}

stoker_status stoker_client_info(const stoker_client* c, stoker_job_info* out) {
  if (c == nullptr || out == nullptr) return fail(STOKER_ERR_INVALID_ARGUMENT, "null argument");
  *out = c->conn->info();
  return STOKER_OK;
}

namespace {

// The handed-out batch moves the position a reconnect would resume from.
void advance_position(stoker_client& c, const BatchView& v) {
  if (v.flags & stoker::proto::kBatchLastInEpoch) {
    c.next_epoch = v.epoch + 1;
    c.next_batch = 0;
  } else {
    c.next_epoch = v.epoch;
    c.next_batch = v.index + 1;
  }
}

}  // namespace

stoker_status stoker_client_next(stoker_client* c, int timeout_ms, stoker_batch** out) {
  if (c == nullptr || out == nullptr) return fail(STOKER_ERR_INVALID_ARGUMENT, "null argument");
  *out = nullptr;
  return guarded([&] {
    auto b = std::make_unique<stoker_batch>();
    try {
      b->view = c->conn->next(timeout_ms);
    } catch (const Failure& f) {
      if (f.status != STOKER_ERR_DISCONNECTED || c->reconnect_timeout_ms <= 0) throw;
      reconnect(*c, f);  // a restarted daemon: carry on at the same position
      b->view = c->conn->next(timeout_ms);
    }
    b->conn = c->conn;
    advance_position(*c, b->view);
    *out = b.release();
    return STOKER_OK;
  });
}

stoker_status stoker_client_try_next(stoker_client* c, stoker_batch** out) {
  if (c == nullptr || out == nullptr) return fail(STOKER_ERR_INVALID_ARGUMENT, "null argument");
  *out = nullptr;
  // The handle first: once an announcement is taken it must reach the caller (a lost one
  // would stay leased until this connection closes).
  auto* b = new (std::nothrow) stoker_batch();
  if (b == nullptr) return fail(STOKER_ERR_INTERNAL, "out of memory");
  if (!c->conn->try_next(&b->view)) {
    delete b;
    return STOKER_ERR_TIMEOUT;  // no error text: not an error, just nothing here yet
  }
  b->conn = c->conn;
  advance_position(*c, b->view);
  *out = b;
  return STOKER_OK;
}

stoker_status stoker_batch_release(stoker_batch* b) {
  if (b == nullptr) return STOKER_OK;
  b->conn->release(b->view.slot, b->view.generation, b->acquired ? &b->stream : nullptr);
  delete b;
  return STOKER_OK;
}

stoker_status stoker_batch_device_images(stoker_batch* b, void* stream, void** out) {
  if (b == nullptr || out == nullptr) return fail(STOKER_ERR_INVALID_ARGUMENT, "null argument");
  *out = nullptr;
  return guarded([&] {
    acquire_on_device(b, reinterpret_cast<stoker::device::StreamId>(stream));
    *out = b->conn->device()->images(b->view.slot);
    return STOKER_OK;
  });
}

stoker_status stoker_batch_device_labels(stoker_batch* b, void* stream, int64_t** out) {
  if (b == nullptr || out == nullptr) return fail(STOKER_ERR_INVALID_ARGUMENT, "null argument");
  *out = nullptr;
  if (b->conn->info().label_dtype != STOKER_INT64) {
    return fail(STOKER_ERR_INVALID_ARGUMENT,
                "this job mixes batches (mixup/cutmix): its labels are soft float rows, not int64; "
                "use stoker_batch_device_label_data");
  }
  return guarded([&] {
    acquire_on_device(b, reinterpret_cast<stoker::device::StreamId>(stream));
    *out = static_cast<int64_t*>(b->conn->device()->labels(b->view.slot));
    return STOKER_OK;
  });
}

stoker_status stoker_batch_device_label_data(stoker_batch* b, void* stream, void** out) {
  if (b == nullptr || out == nullptr) return fail(STOKER_ERR_INVALID_ARGUMENT, "null argument");
  *out = nullptr;
  return guarded([&] {
    acquire_on_device(b, reinterpret_cast<stoker::device::StreamId>(stream));
    *out = b->conn->device()->labels(b->view.slot);
    return STOKER_OK;
  });
}

stoker_status stoker_batch_device_synchronize(stoker_batch* b) {
  if (b == nullptr) return fail(STOKER_ERR_INVALID_ARGUMENT, "null argument");
  return guarded([&] {
    if (!b->acquired) acquire_on_device(b, stoker::device::kDefaultStream);
    auto* dev = b->conn->device();
    if (stoker::base::Status s = dev->backend().synchronize_stream(dev->ordinal(), b->stream); !s) {
      throw Failure{STOKER_ERR_INTERNAL, "device synchronize: " + s.message()};
    }
    return STOKER_OK;
  });
}

stoker_status stoker_client_pin_memory(stoker_client* c, int ordinal) {
  if (c == nullptr || ordinal < 0) return fail(STOKER_ERR_INVALID_ARGUMENT, "bad argument");
  return guarded([&] {
    c->conn->pin_memory(ordinal);
    return STOKER_OK;
  });
}

int stoker_batch_on_device(const stoker_batch* b) { return b && b->view.on_device ? 1 : 0; }

stoker_status stoker_batch_device_to_host(stoker_batch* b, void* images_out, void* labels_out) {
  if (b == nullptr) return fail(STOKER_ERR_INVALID_ARGUMENT, "null argument");
  return guarded([&] {
    if (!b->acquired) acquire_on_device(b, stoker::device::kDefaultStream);
    if (stoker::base::Status s = b->conn->device()->copy_to_host(b->view.slot, b->view.count, images_out,
                                                                 labels_out, b->stream);
        !s) {
      throw Failure{STOKER_ERR_INTERNAL, "copy from the device: " + s.message()};
    }
    return STOKER_OK;
  });
}

const void* stoker_batch_images(const stoker_batch* b) { return b ? b->view.images : nullptr; }
const int64_t* stoker_batch_labels(const stoker_batch* b) {
  if (b == nullptr || b->conn->info().label_dtype != STOKER_INT64) return nullptr;
  return static_cast<const int64_t*>(b->view.labels);
}
const void* stoker_batch_label_data(const stoker_batch* b) { return b ? b->view.labels : nullptr; }
int stoker_batch_label_shape(const stoker_batch* b, uint64_t shape[2]) {
  if (shape == nullptr) return 0;
  shape[0] = shape[1] = 0;
  if (b == nullptr) return 0;
  const stoker_job_info& i = b->conn->info();
  shape[0] = b->view.count;
  if (i.label_dtype == STOKER_INT64) return 1;
  shape[1] = i.label_width;
  return 2;
}
const int64_t* stoker_batch_ids(const stoker_batch* b) { return b ? b->view.ids : nullptr; }
uint32_t stoker_batch_count(const stoker_batch* b) { return b ? b->view.count : 0; }
uint64_t stoker_batch_epoch(const stoker_batch* b) { return b ? b->view.epoch : 0; }
uint64_t stoker_batch_index(const stoker_batch* b) { return b ? b->view.index : 0; }
void stoker_batch_shape(const stoker_batch* b, uint64_t shape[4]) {
  if (shape == nullptr) return;
  if (b == nullptr) {
    shape[0] = shape[1] = shape[2] = shape[3] = 0;
    return;
  }
  const stoker_job_info& i = b->conn->info();
  shape[0] = b->view.count;
  if (i.layout == STOKER_NCHW) {
    shape[1] = i.channels; shape[2] = i.height; shape[3] = i.width;
  } else {
    shape[1] = i.height; shape[2] = i.width; shape[3] = i.channels;
  }
}

int stoker_batch_last_in_epoch(const stoker_batch* b) {
  return b && (b->view.flags & stoker::proto::kBatchLastInEpoch) ? 1 : 0;
}

namespace {

// Sends one request on a fresh connection and returns the JSON reply (one or more StatusReply
// messages, kStatusMoreFollows on all but the last), as a malloc'd string in *out.
stoker_status json_request(const char* socket_path, const std::vector<std::uint8_t>& request, int timeout_ms,
                           char** out) {
  return guarded([&] {
    const std::string socket = stoker::proto::resolve_client_socket_path(socket_path ? socket_path : "");
    const int fd = stoker::client::connect_control_socket(socket);
    struct Closer {
      int fd;
      ~Closer() { ::close(fd); }
    } closer{fd};
    stoker::client::send_message(fd, request.data(), request.size(), socket);  // a refusal at accept says why
    std::vector<std::uint8_t> buf(stoker::proto::kMaxMessageBytes);
    std::string json;
    for (;;) {
      const std::size_t n = stoker::client::recv_message(fd, buf.data(), buf.size(), timeout_ms, socket);
      stoker::proto::MessageHeader h;
      std::memcpy(&h, buf.data(), sizeof h);
      if (static_cast<stoker::proto::MsgType>(h.type) == stoker::proto::MsgType::kError) {
        stoker::client::throw_daemon_error(buf.data(), n);
      }
      if (static_cast<stoker::proto::MsgType>(h.type) != stoker::proto::MsgType::kStatusReply) {
        throw Failure{STOKER_ERR_PROTOCOL, "unexpected reply from stokerd"};
      }
      json.append(reinterpret_cast<const char*>(buf.data()) + sizeof h, n - sizeof h);
      if ((h.reserved & stoker::proto::kStatusMoreFollows) == 0) break;
      if (json.size() > (std::size_t{256} << 20)) throw Failure{STOKER_ERR_PROTOCOL, "reply too large"};
    }
    char* s = static_cast<char*>(std::malloc(json.size() + 1));
    if (s == nullptr) throw std::bad_alloc();
    std::memcpy(s, json.data(), json.size());
    s[json.size()] = '\0';
    *out = s;
    return STOKER_OK;
  });
}

}  // namespace

stoker_status stoker_daemon_status(const char* socket_path, char** json_out) {
  if (json_out == nullptr) return fail(STOKER_ERR_INVALID_ARGUMENT, "null argument");
  *json_out = nullptr;
  auto q = stoker::proto::make_message<stoker::proto::StatusQueryMsg>(stoker::proto::MsgType::kStatusQuery);
  const auto* p = reinterpret_cast<const std::uint8_t*>(&q);
  return json_request(socket_path, std::vector<std::uint8_t>(p, p + sizeof q), 10000, json_out);
}

stoker_status stoker_daemon_command(const char* socket_path, const char* request_json, int timeout_ms,
                                    char** reply_json) {
  if (reply_json == nullptr || request_json == nullptr) return fail(STOKER_ERR_INVALID_ARGUMENT, "null argument");
  *reply_json = nullptr;
  const std::size_t len = std::strlen(request_json);
  constexpr std::size_t kHeader = sizeof(stoker::proto::MessageHeader);
  if (len > stoker::proto::kMaxMessageBytes - kHeader) {
    return fail(STOKER_ERR_INVALID_ARGUMENT, "command longer than " +
                                                 std::to_string(stoker::proto::kMaxMessageBytes - kHeader) + " bytes");
  }
  auto h = stoker::proto::make_message<stoker::proto::StatusQueryMsg>(stoker::proto::MsgType::kCommand).header;
  h.size = static_cast<std::uint32_t>(kHeader + len);
  std::vector<std::uint8_t> msg(kHeader + len);
  std::memcpy(msg.data(), &h, kHeader);
  std::memcpy(msg.data() + kHeader, request_json, len);
  return json_request(socket_path, msg, timeout_ms, reply_json);
}

void stoker_free(void* p) { std::free(p); }

const char* stoker_last_error(void) { return g_last_error.c_str(); }

const char* stoker_version(void) {
  static const std::string v = std::string(STOKER_VERSION) + " (protocol " + std::to_string(stoker::proto::kProtoMajor) +
                               "." + std::to_string(stoker::proto::kProtoMinor) + ")";
  return v.c_str();
}

const char* stoker_status_name(stoker_status s) {
  switch (s) {
    case STOKER_OK: return "ok";
    case STOKER_ERR_INVALID_ARGUMENT: return "invalid argument";
    case STOKER_ERR_NO_DAEMON: return "no daemon";
    case STOKER_ERR_REFUSED: return "refused";
    case STOKER_ERR_VERSION: return "version mismatch";
    case STOKER_ERR_DISCONNECTED: return "disconnected";
    case STOKER_ERR_TIMEOUT: return "timeout";
    case STOKER_ERR_JOB_FAILED: return "job failed";
    case STOKER_ERR_PROTOCOL: return "protocol error";
    case STOKER_ERR_INTERNAL: return "internal error";
  }
  return "unknown";
}

}  // extern "C"
