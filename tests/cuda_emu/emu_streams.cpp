// Streams and events. A stream is a thread running its queue in order, each operation after a
// random delay (STOKER_CUDA_EMU_DELAY_US), so work that is not ordered by a wait runs late
// enough to show. Events count records issued and completed in an ObjectHeader (a
// shared-memory object for CU_EVENT_INTERPROCESS events), so waits order across processes.
// Destroyed streams and events are kept (never reused) so a later use is recognised and aborts.
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "emu.hpp"

namespace cuemu {

struct Queue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Work> work;
  std::uint64_t submitted = 0, done = 0;
  bool stop = false;
};

struct Stream {
  Context* ctx;
  unsigned flags;
  std::shared_ptr<Queue> q;
};

struct Event {
  Context* ctx;
  unsigned flags;
  bool imported;  // opened with cuIpcOpenEventHandle
  std::shared_ptr<Shared> obj;
};

namespace {

struct Registry {
  std::mutex mu;
  std::set<Stream*> streams;  // live
  std::set<Event*> events;    // live
  std::map<Context*, Stream*> null_streams;
  // Destroyed ones, kept reachable (a later use is recognised by its absence above; keeping
  // the address also means no new object ever takes it).
  std::vector<Stream*> dead_streams;
  std::vector<Event*> dead_events;
};
Registry& reg() {
  static Registry* r = new Registry;  // never destroyed, as everything stream threads touch
  return *r;
}

void run(std::shared_ptr<Queue> q) {
  for (;;) {
    Work w;
    {
      std::unique_lock lock(q->mu);
      q->cv.wait(lock, [&] { return !q->work.empty() || q->stop; });
      if (q->work.empty()) return;
      w = std::move(q->work.front());
      q->work.pop_front();
    }
    if (const auto us = random_delay_us()) std::this_thread::sleep_for(std::chrono::microseconds(us));
    w();
    std::lock_guard lock(q->mu);
    ++q->done;
    q->cv.notify_all();
  }
}

// Stream threads never end: a destroyed stream's thread finishes its queue and then waits to
// serve the next new stream. (A thread that ends while the process exits races with exit-time
// checkers such as LeakSanitizer, which then cannot stop it.)
struct Worker {
  std::mutex mu;
  std::condition_variable cv;
  std::shared_ptr<Queue> q;  // the stream served now, or null while idle
};
struct Workers {
  std::mutex mu;
  std::vector<Worker*> idle;
};
Workers& workers() {
  static Workers* w = new Workers;
  return *w;
}

void serve(Worker* w) {
  for (;;) {
    std::shared_ptr<Queue> q;
    {
      std::unique_lock lock(w->mu);
      w->cv.wait(lock, [&] { return w->q != nullptr; });
      q = w->q;
    }
    run(q);  // until the stream is destroyed and its queue ran
    {
      std::lock_guard lock(w->mu);
      w->q.reset();
    }
    std::lock_guard lock(workers().mu);
    workers().idle.push_back(w);
  }
}

Stream* new_stream(Context* ctx, unsigned flags) {
  auto* s = new Stream{ctx, flags, std::make_shared<Queue>()};
  Worker* w = nullptr;
  {
    std::lock_guard lock(workers().mu);
    if (!workers().idle.empty()) {
      w = workers().idle.back();
      workers().idle.pop_back();
    }
  }
  if (w == nullptr) {
    w = new Worker;
    std::thread(serve, w).detach();
  }
  {
    std::lock_guard lock(w->mu);
    w->q = s->q;
  }
  w->cv.notify_one();
  return s;
}

// The stream a call names: the current context's null stream for 0, else a live stream of
// the current context. A destroyed stream aborts; one of another context fails the call.
Stream* stream_for(const char* call, CUstream s, bool& other_context) {
  Context* ctx = current_context();
  std::lock_guard lock(reg().mu);
  other_context = false;
  if (s == nullptr) {
    Stream*& n = reg().null_streams[ctx];
    if (n == nullptr) n = new_stream(ctx, 0);
    return n;
  }
  if (reg().streams.count(s) == 0) {
    char what[120];
    std::snprintf(what, sizeof what, "stream %p was destroyed (or never created)", static_cast<void*>(s));
    fail(call, what);
  }
  other_context = s->ctx != ctx;
  return s;
}

Event* live_event(const char* call, CUevent e) {
  std::lock_guard lock(reg().mu);
  if (reg().events.count(e) == 0) {
    char what[120];
    std::snprintf(what, sizeof what, "event %p was destroyed (or never created)", static_cast<void*>(e));
    fail(call, what);
  }
  return e;
}

// Until record number `target` of `h` completed. A record whose process died never completes
// on its own: the driver tears a dead process's queued work down, so the wait is released.
void wait_record(const ObjectHeader& h, std::uint64_t target) {
  int spins = 0;
  while (h.completed.load() < target) {
    const int by = h.recorder.load();
    if (by != ::getpid() && !process_alive(by)) return;
    std::this_thread::sleep_for(std::chrono::microseconds(++spins < 100 ? 20 : 200));
  }
}

}  // namespace

bool enqueue(const char* call, CUstream s, Work w) {
  bool other = false;
  Stream* st = stream_for(call, s, other);
  if (other) return false;
  std::lock_guard lock(st->q->mu);
  st->q->work.push_back(std::move(w));
  ++st->q->submitted;
  st->q->cv.notify_all();
  return true;
}

void stream_sync(const char* call, CUstream s) {
  bool other = false;
  Stream* st = stream_for(call, s, other);
  std::unique_lock lock(st->q->mu);
  const std::uint64_t target = st->q->submitted;
  st->q->cv.wait(lock, [&] { return st->q->done >= target; });
}

}  // namespace cuemu

using namespace cuemu;

CUEMU_API CUresult cuStreamCreate(CUstream* out, unsigned flags) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (out == nullptr || (flags & ~kStreamNonBlocking) != 0) return CUDA_ERROR_INVALID_VALUE;
  Stream* s = new_stream(current_context(), flags);
  {
    std::lock_guard lock(reg().mu);
    reg().streams.insert(s);
  }
  ++stats().streams;
  *out = s;
  return CUDA_SUCCESS;
}

CUEMU_API CUresult cuStreamDestroy_v2(CUstream s) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  bool other = false;
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  stream_for("cuStreamDestroy", s, other);
  {
    std::lock_guard lock(reg().mu);
    reg().streams.erase(s);
    reg().dead_streams.push_back(s);
  }
  // Returns at once; work already queued still runs (as CUDA does), then the thread serves
  // the next new stream.
  std::lock_guard lock(s->q->mu);
  s->q->stop = true;
  s->q->cv.notify_all();
  --stats().streams;
  return CUDA_SUCCESS;
}

CUEMU_API CUresult cuStreamSynchronize(CUstream s) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  bool other = false;
  stream_for("cuStreamSynchronize", s, other);
  stream_sync("cuStreamSynchronize", s);
  return CUDA_SUCCESS;
}

CUEMU_API CUresult cuEventCreate(CUevent* out, unsigned flags) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (out == nullptr || (flags & ~0xfu) != 0) return CUDA_ERROR_INVALID_VALUE;
  // An interprocess event must also be created with CU_EVENT_DISABLE_TIMING.
  if ((flags & kEventInterprocess) != 0 && (flags & kEventDisableTiming) == 0) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Shared> obj;
  if ((flags & kEventInterprocess) != 0) {
    std::string name;
    obj = create_shared(kEventMagic, context_device(current_context()), 0, name);
    if (obj == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  } else {
    obj = std::make_shared<Shared>();
    obj->header = new ObjectHeader{};
    obj->header->magic = kEventMagic;
    obj->header->creator = ::getpid();
  }
  auto* e = new Event{current_context(), flags, false, std::move(obj)};
  {
    std::lock_guard lock(reg().mu);
    reg().events.insert(e);
  }
  ++stats().events;
  *out = e;
  return CUDA_SUCCESS;
}

CUEMU_API CUresult cuEventDestroy_v2(CUevent e) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  live_event("cuEventDestroy", e);
  const ObjectHeader& h = *e->obj->header;
  if (e->imported) {
    add_opener(*e->obj->header, -1);
    --stats().ipc_events_opened;
  } else {
    if (const int peer = live_opener(h)) {
      fail("cuEventDestroy", "process " + std::to_string(peer) +
                                 " still has this interprocess event open through cuIpcOpenEventHandle (" +
                                 process_state(peer) + ")");
    }
    if (e->obj->map_bytes != 0) ::shm_unlink(e->obj->name.c_str());
    --stats().events;
  }
  std::lock_guard lock(reg().mu);
  reg().events.erase(e);
  reg().dead_events.push_back(e);
  e->obj.reset();         // queued work keeps the object mapped until it ran
  return CUDA_SUCCESS;
}

CUEMU_API CUresult cuEventRecord(CUevent e, CUstream s) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  live_event("cuEventRecord", e);
  // An event records work of its own context only.
  if (e->ctx != current_context()) return CUDA_ERROR_INVALID_HANDLE;
  auto obj = e->obj;
  ObjectHeader& h = *obj->header;
  const std::uint64_t n = ++h.recorded;
  h.recorder = ::getpid();
  if (!enqueue("cuEventRecord", s, [obj, n] {
        std::uint64_t c = obj->header->completed.load();
        while (c < n && !obj->header->completed.compare_exchange_weak(c, n)) {
        }
      })) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  return CUDA_SUCCESS;
}

CUEMU_API CUresult cuEventQuery(CUevent e) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  live_event("cuEventQuery", e);
  const ObjectHeader& h = *e->obj->header;
  return h.completed.load() >= h.recorded.load() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUEMU_API CUresult cuEventSynchronize(CUevent e) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  live_event("cuEventSynchronize", e);
  auto obj = e->obj;
  wait_record(*obj->header, obj->header->recorded.load());
  return CUDA_SUCCESS;
}

CUEMU_API CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned flags) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  live_event("cuStreamWaitEvent", e);
  auto obj = e->obj;
  // Waits for the event's latest record at the time of this call, not for later ones.
  const std::uint64_t target = obj->header->recorded.load();
  return enqueue("cuStreamWaitEvent", s, [obj, target] { wait_record(*obj->header, target); })
             ? CUDA_SUCCESS
             : CUDA_ERROR_INVALID_HANDLE;
}

CUEMU_API CUresult cuIpcGetEventHandle(CUipcEventHandle* h, CUevent e) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  live_event("cuIpcGetEventHandle", e);
  if (h == nullptr || e->imported || (e->flags & kEventInterprocess) == 0) return CUDA_ERROR_INVALID_VALUE;
  HandleBytes b{};
  b.magic = kEventMagic;
  b.creator = e->obj->header->creator;
  b.device = e->obj->header->device;
  b.bytes = 0;
  std::snprintf(b.name, sizeof b.name, "%s", e->obj->name.c_str());
  std::memcpy(h->reserved, &b, sizeof b);
  return CUDA_SUCCESS;
}

CUEMU_API CUresult cuIpcOpenEventHandle(CUevent* out, CUipcEventHandle h) {
  if (CUresult r = need_context(); r != CUDA_SUCCESS) return r;
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  HandleBytes b;
  std::memcpy(&b, h.reserved, sizeof b);
  if (b.magic != kEventMagic || b.name[sizeof b.name - 1] != '\0') return CUDA_ERROR_INVALID_HANDLE;
  if (b.creator == ::getpid()) return CUDA_ERROR_INVALID_CONTEXT;  // as for memory handles
  auto obj = open_shared(b);
  if (obj == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  add_opener(*obj->header, +1);
  auto* e = new Event{current_context(), kEventInterprocess | kEventDisableTiming, true, std::move(obj)};
  {
    std::lock_guard lock(reg().mu);
    reg().events.insert(e);
  }
  ++stats().ipc_events_opened;
  *out = e;
  return CUDA_SUCCESS;
}
