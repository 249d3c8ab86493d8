// What integration tests compare: a batch copied out of its slot (host batches), taken one by
// one or an epoch at a time, and the daemon's status JSON as text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "stoker/stoker.hpp"

namespace stoker::test {

struct BatchCopy {
  std::uint64_t epoch, index;
  std::vector<std::int64_t> ids, labels;
  std::vector<std::uint8_t> bytes;  // the images of the batch's count() samples
  bool last;
  bool operator==(const BatchCopy&) const = default;
};

// A copy of batch `b` of client `c`.
inline BatchCopy copy_of(const stoker::Batch& b, const stoker::Client& c) {
  BatchCopy r{b.epoch(), b.index(), {}, {}, {}, b.last_in_epoch()};
  r.ids.assign(b.ids(), b.ids() + b.count());
  r.labels.assign(b.labels(), b.labels() + b.count());
  r.bytes.assign(b.images(), b.images() + c.info().image_bytes * b.count());
  return r;
}

// The next batch, copied (the batch is released on return).
inline BatchCopy take_batch(stoker::Client& c, int timeout_ms = 30000) { return copy_of(c.next(timeout_ms), c); }

// Batches up to and including the next one flagged last in its epoch.
inline std::vector<BatchCopy> take_epoch(stoker::Client& c) {
  std::vector<BatchCopy> out;
  do {
    out.push_back(take_batch(c));
  } while (!out.back().last);
  return out;
}

// Client options for the daemon on `socket`, starting at `epoch` (the rest default).
inline stoker::ClientOptions at(const std::string& socket, std::uint64_t epoch = 0) {
  stoker::ClientOptions o;
  o.socket_path = socket;
  o.start_epoch = epoch;
  return o;
}

inline std::string daemon_status_text(const std::string& socket) {
  char* json = nullptr;
  REQUIRE(stoker_daemon_status(socket.c_str(), &json) == STOKER_OK);
  std::string s = json;
  stoker_free(json);
  return s;
}

}  // namespace stoker::test
