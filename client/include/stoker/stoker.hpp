// C++ wrapper over the C API: RAII handles and exceptions on the C++ side only.
//
//   stoker::Client c("imagenet-train", rank);
//   for (;;) {
//     stoker::Batch b = c.next();          // view into shared memory, no copy
//     use(b.images<std::uint8_t>(), b.labels(), b.count());
//   }                                      // slot handed back when b goes out of scope
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "stoker/stoker.h"

namespace stoker {

class Error : public std::runtime_error {
 public:
  Error(stoker_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  stoker_status status() const { return status_; }

 private:
  stoker_status status_;
};

inline void check(stoker_status s) {
  if (s != STOKER_OK) throw Error(s, stoker_last_error());
}

class Batch {
 public:
  Batch() = default;
  explicit Batch(stoker_batch* b) : b_(b) {}
  Batch(Batch&& o) noexcept : b_(std::exchange(o.b_, nullptr)) {}
  Batch& operator=(Batch&& o) noexcept {
    if (this != &o) {
      reset();
      b_ = std::exchange(o.b_, nullptr);
    }
    return *this;
  }
  ~Batch() { reset(); }
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;

  explicit operator bool() const { return b_ != nullptr; }
  template <class T = std::uint8_t>
  const T* images() const { return static_cast<const T*>(stoker_batch_images(b_)); }
  // Class indices; nullptr for a mixing job, whose soft labels soft_labels<T>() gives.
  const std::int64_t* labels() const { return stoker_batch_labels(b_); }
  // Labels in the job's label dtype (Client::info().label_dtype): T = float (or std::uint16_t
  // holding float16) for soft rows [count][label_width], std::int64_t for class indices.
  template <class T = float>
  const T* soft_labels() const { return static_cast<const T*>(stoker_batch_label_data(b_)); }
  // {count, 1} for class indices, {count, label_width} for soft labels.
  std::array<std::uint64_t, 2> label_shape() const {
    std::array<std::uint64_t, 2> s{};
    if (stoker_batch_label_shape(b_, s.data()) == 1) s[1] = 1;
    return s;
  }
  const std::int64_t* ids() const { return stoker_batch_ids(b_); }
  std::uint32_t count() const { return stoker_batch_count(b_); }
  std::uint64_t epoch() const { return stoker_batch_epoch(b_); }
  std::uint64_t index() const { return stoker_batch_index(b_); }
  bool last_in_epoch() const { return stoker_batch_last_in_epoch(b_) != 0; }
  // {count, C, H, W} (NCHW) or {count, H, W, C} (NHWC).
  std::array<std::uint64_t, 4> shape() const {
    std::array<std::uint64_t, 4> s{};
    stoker_batch_shape(b_, s.data());
    return s;
  }
  bool on_device() const { return stoker_batch_on_device(b_) != 0; }
  // Device pointers ordered on `stream` (a cudaStream_t; nullptr: legacy default stream); the
  // release fence goes on the stream of the first call. Throws stoker::Error.
  void* device_images(void* stream = nullptr) {
    void* p = nullptr;
    check(stoker_batch_device_images(b_, stream, &p));
    return p;
  }
  std::int64_t* device_labels(void* stream = nullptr) {
    int64_t* p = nullptr;
    check(stoker_batch_device_labels(b_, stream, &p));
    return p;
  }
  // Device labels as the host has them (class indices or soft rows).
  void* device_label_data(void* stream = nullptr) {
    void* p = nullptr;
    check(stoker_batch_device_label_data(b_, stream, &p));
    return p;
  }
  // Copies the device copy back to host memory (blocking; checks and dumps); `labels` holds
  // count x label_width values of the label dtype.
  void device_to_host(void* images, void* labels) {
    check(stoker_batch_device_to_host(b_, images, labels));
  }
  // Hands the C handle over (the caller releases it with stoker_batch_release).
  stoker_batch* detach() { return std::exchange(b_, nullptr); }
  // Gives the slot back now instead of at destruction.
  void reset() {
    if (b_ != nullptr) stoker_batch_release(std::exchange(b_, nullptr));
  }

 private:
  stoker_batch* b_ = nullptr;
};

struct ClientOptions {
  std::string socket_path;  // empty: environment / default
  std::uint64_t start_epoch = 0;
  std::uint64_t start_batch = 0;
  bool want_device = false;  // same as device = "cuda"
  std::string device;        // "" host batches; "cuda" ($LOCAL_RANK) or "cuda:N"
  int reconnect_timeout_ms = 0;  // > 0: wait this long for a restarted daemon (stoker.h)
  std::uint32_t reader = 0;      // fan-out jobs: which of the rank's readers (stoker.h)
  std::uint64_t start_position = 0;  // elastic resume: samples the whole world consumed (stoker.h)
};

class Client {
 public:
  Client(const std::string& job, std::uint32_t rank, const ClientOptions& o = {}) {
    stoker_options opts;
    stoker_options_init(&opts);
    opts.socket_path = o.socket_path.empty() ? nullptr : o.socket_path.c_str();
    opts.job = job.c_str();
    opts.rank = rank;
    opts.start_epoch = o.start_epoch;
    opts.start_batch = o.start_batch;
    opts.want_device = o.want_device ? 1 : 0;
    opts.device = o.device.empty() ? nullptr : o.device.c_str();
    opts.reconnect_timeout_ms = o.reconnect_timeout_ms;
    opts.reader = o.reader;
    opts.start_position = o.start_position;
    check(stoker_client_open(&opts, &c_));
    check(stoker_client_info(c_, &info_));
  }
  ~Client() { stoker_client_close(c_); }
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Blocks until the next batch (timeout_ms < 0: forever); throws stoker::Error.
  Batch next(int timeout_ms = -1) {
    stoker_batch* b = nullptr;
    check(stoker_client_next(c_, timeout_ms, &b));
    return Batch(b);
  }
  // The next batch if it has already arrived (stoker_client_try_next), else nullopt at once.
  std::optional<Batch> try_next() {
    stoker_batch* b = nullptr;
    const stoker_status s = stoker_client_try_next(c_, &b);
    if (s == STOKER_ERR_TIMEOUT) return std::nullopt;
    check(s);
    return Batch(b);
  }
  const stoker_job_info& info() const { return info_; }

 private:
  stoker_client* c_ = nullptr;
  stoker_job_info info_{};
};

}  // namespace stoker
