// What the native module's files share: the exceptions it raises, one client's state and one
// leased batch.
//
// Client and Batch are plain CPython types (batch_object.cpp, client_object.cpp), not pybind11
// classes: a pybind11 call walks its dispatcher, argument casters and instance registry, and on a
// core that has just woken from the trainer's step (caches cold) that alone cost ~7 µs of the
// ~11 µs `next()` took, against ~1 µs for libstoker to hand over a buffered batch (issue #36,
// docs/PERFORMANCE.md). pybind11 still builds the module, the dicts, capsules and arrays.
#pragma once

#include <pybind11/pybind11.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "base/mutex.hpp"
#include "stoker/stoker.h"

namespace stoker::python {

namespace py = pybind11;

// Exception classes by status, created by the module's init (index < kStatusCount).
constexpr int kStatusCount = 10;
extern PyObject* g_errors[kStatusCount];

inline const char* dtype_name(stoker_dtype t) {
  return t == STOKER_UINT8 ? "uint8" : t == STOKER_FLOAT16 ? "float16" : t == STOKER_INT64 ? "int64" : "float32";
}

// Sets the status's exception with stoker_last_error() as its text; returns nullptr (what a
// CPython function returns with an error set).
PyObject* status_error(stoker_status s) noexcept;
// The same, thrown as py::error_already_set (for code under pybind11 or guarded()).
[[noreturn]] void raise_status(stoker_status s);
// Inside a catch block: the current C++ exception as a Python error (an error_already_set is
// restored as it was).
void set_python_error() noexcept;
// Runs a raw CPython entry point's body: what it returns, or `failed` with the Python error set
// for any exception (a CPython function must not throw).
template <class R, class F>
R guarded(R failed, F&& body) noexcept {
  try {
    return body();
  } catch (...) {
    set_python_error();
    return failed;
  }
}

struct ClientState {
  // Held (without the GIL) across stoker_client_next and stoker_client_close, so a close()
  // from another thread waits for a running next() instead of freeing the handle under it.
  // Taken with the GIL held only by try_lock (Client.next's buffered path): never waited on.
  base::Mutex mu;
  // Set by Client's constructor before the state is shared.
  stoker_client* client STOKER_GUARDED_BY(mu) = nullptr;
  stoker_job_info info{};
  std::atomic<int> outstanding{0};  // batches handed out and not yet released
  ~ClientState() {
    if (client != nullptr) stoker_client_close(client);
  }
};

// One leased slot. Shared by the Python Batch object and every exported tensor/array; the
// slot is released when the last owner goes, or earlier by release().
// Everything a batch reports is copied out at construction, so nothing reads the C handle
// after an explicit release() freed it.
struct BatchHandle {
  stoker_batch* batch;
  std::shared_ptr<ClientState> client;
  std::once_flag released;
  std::atomic<bool> is_released{false};
  std::uint64_t epoch, index;
  std::uint32_t count;
  bool last;
  const void* images;
  const void* labels;  // class indices or soft rows (ClientState::info.label_dtype)
  const std::int64_t* ids;
  bool on_device;
  BatchHandle(stoker_batch* b, std::shared_ptr<ClientState> c);
  ~BatchHandle() { release(); }
  void release();
};

// A new _stoker.Batch owning batch `b` of `client` (counted in client->outstanding). On
// failure: nullptr with a Python error set, and `b` released.
PyObject* new_batch(stoker_batch* b, const std::shared_ptr<ClientState>& client) noexcept;

// Add the types to the module.
void add_batch_type(py::module_& m);
void add_client_type(py::module_& m);

}  // namespace stoker::python
