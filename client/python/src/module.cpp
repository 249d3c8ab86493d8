// _stoker: the native half of `import stoker`. A thin layer over libstoker's C API:
//  - Client.next() releases the GIL while it waits;
//  - batches are exported zero-copy, as DLPack capsules (torch) or read-only NumPy views;
//  - a batch's slot goes back to the daemon when the last Python object or tensor that
//    refers to it dies, or at once on Batch.release().
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dlpack_abi.hpp"
#include "base/mutex.hpp"
#include "stoker/stoker.h"

namespace py = pybind11;

namespace {

// Exception classes, created in PYBIND11_MODULE, raised by status.
PyObject* g_errors[10] = {};

[[noreturn]] void raise_status(stoker_status s) {
  PyObject* cls = (s >= 0 && s < 10 && g_errors[s] != nullptr) ? g_errors[s] : g_errors[STOKER_ERR_INTERNAL];
  PyErr_SetString(cls, stoker_last_error());
  throw py::error_already_set();
}

struct ClientState;

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
  BatchHandle(stoker_batch* b, std::shared_ptr<ClientState> c)
      : batch(b),
        client(std::move(c)),
        epoch(stoker_batch_epoch(b)),
        index(stoker_batch_index(b)),
        count(stoker_batch_count(b)),
        last(stoker_batch_last_in_epoch(b) != 0),
        images(stoker_batch_images(b)),
        labels(stoker_batch_label_data(b)),
        ids(stoker_batch_ids(b)),
        on_device(stoker_batch_on_device(b) != 0) {}
  ~BatchHandle() { release(); }
  void release();
};

struct ClientState {
  // Held (without the GIL) across stoker_client_next and stoker_client_close, so a close()
  // from another thread waits for a running next() instead of freeing the handle under it.
  stoker::base::Mutex mu;
  // Set by Client's constructor before the state is shared.
  stoker_client* client STOKER_GUARDED_BY(mu) = nullptr;
  stoker_job_info info{};
  std::atomic<int> outstanding{0};  // batches handed out and not yet released
  ~ClientState() {
    if (client != nullptr) stoker_client_close(client);
  }
};

void BatchHandle::release() {
  std::call_once(released, [&] {
    stoker_batch_release(batch);  // safe after the client was closed
    is_released.store(true);
    client->outstanding.fetch_sub(1);
  });
}

std::int64_t dtype_bits(stoker_dtype t) {
  return t == STOKER_UINT8 ? 8 : t == STOKER_FLOAT16 ? 16 : t == STOKER_INT64 ? 64 : 32;
}

// Labels: int64 class indices, or (mixup/cutmix jobs) float soft targets of label_width.
dlpack::DLDataType label_dl_type(const stoker_job_info& i) {
  const std::uint8_t code = i.label_dtype == STOKER_INT64 ? dlpack::kDLInt : dlpack::kDLFloat;
  return {code, static_cast<std::uint8_t>(dtype_bits(i.label_dtype)), 1};
}
const char* dtype_name(stoker_dtype t) {
  return t == STOKER_UINT8 ? "uint8" : t == STOKER_FLOAT16 ? "float16" : t == STOKER_INT64 ? "int64" : "float32";
}

// A DLPack tensor owning a shared reference to its batch.
struct DLPackOwner {
  dlpack::DLManagedTensor managed;
  std::shared_ptr<BatchHandle> batch;
  std::int64_t shape[4];
};

void dlpack_deleter(dlpack::DLManagedTensor* t) {
  delete static_cast<DLPackOwner*>(t->manager_ctx);
}

// Capsule destructor: only frees the tensor if no consumer took it (renamed "used_dltensor").
void capsule_destructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* t = static_cast<dlpack::DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    if (t != nullptr && t->deleter != nullptr) t->deleter(t);
  }
}

py::capsule make_capsule(const std::shared_ptr<BatchHandle>& b, const void* data, dlpack::DLDataType dt,
                         std::initializer_list<std::int64_t> shape,
                         dlpack::DLDevice device = {dlpack::kDLCPU, 0}) {
  auto* owner = new DLPackOwner{};
  owner->batch = b;
  int nd = 0;
  for (auto s : shape) owner->shape[nd++] = s;
  auto& t = owner->managed.dl_tensor;
  t.data = const_cast<void*>(data);
  t.device = device;
  t.ndim = nd;
  t.dtype = dt;
  t.shape = owner->shape;
  t.strides = nullptr;  // compact row-major
  t.byte_offset = 0;
  owner->managed.manager_ctx = owner;
  owner->managed.deleter = dlpack_deleter;
  PyObject* cap = PyCapsule_New(&owner->managed, "dltensor", capsule_destructor);
  if (cap == nullptr) {
    delete owner;
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::capsule>(cap);
}

class Batch {
 public:
  Batch(std::shared_ptr<BatchHandle> h) : h_(std::move(h)) {}

  std::uint64_t epoch() const { return h_->epoch; }
  std::uint64_t index() const { return h_->index; }
  std::uint32_t count() const { return h_->count; }
  bool last() const { return h_->last; }
  void release() { h_->release(); }
  bool released() const { return h_->is_released.load(); }

  std::vector<std::int64_t> image_shape() const {
    const auto& i = h_->client->info;
    const std::int64_t n = count();
    if (i.layout == STOKER_NCHW) return {n, i.channels, i.height, i.width};
    return {n, i.height, i.width, i.channels};
  }

  py::capsule images_dlpack() const {
    const auto s = image_shape();
    const dlpack::DLDataType dt{h_->client->info.dtype == STOKER_UINT8 ? dlpack::kDLUInt : dlpack::kDLFloat,
                                static_cast<std::uint8_t>(dtype_bits(h_->client->info.dtype)), 1};
    return make_capsule(h_, h_->images, dt, {s[0], s[1], s[2], s[3]});
  }
  bool on_device() const { return h_->on_device; }

  // Device batches: the capsules view the device copy, ordered on `stream` (the trainer's
  // current cudaStream_t; 0: legacy default) by a GPU wait. Under the hostsim backend the
  // memory is host memory: the stream is synchronized and the capsule says kDLCPU.
  py::capsule device_images_dlpack(std::uintptr_t stream) const {
    void* p = nullptr;
    device_pointer(stream, [&] { return stoker_batch_device_images(h_->batch, reinterpret_cast<void*>(stream), &p); });
    const auto& i = h_->client->info;
    const auto s = image_shape();
    const dlpack::DLDataType dt{i.device_dtype == STOKER_UINT8 ? dlpack::kDLUInt : dlpack::kDLFloat,
                                static_cast<std::uint8_t>(dtype_bits(i.device_dtype)), 1};
    return make_capsule(h_, p, dt, {s[0], s[1], s[2], s[3]}, where());
  }
  py::capsule device_labels_dlpack(std::uintptr_t stream) const {
    void* p = nullptr;
    device_pointer(stream, [&] { return stoker_batch_device_label_data(h_->batch, reinterpret_cast<void*>(stream), &p); });
    const auto& i = h_->client->info;
    if (i.label_dtype == STOKER_INT64) return make_capsule(h_, p, label_dl_type(i), {count()}, where());
    return make_capsule(h_, p, label_dl_type(i), {count(), i.label_width}, where());
  }

  // [count] int64, or [count, num_classes] float for a mixing job (same dtype as the images,
  // float32 for uint8 images).
  py::capsule labels_dlpack() const {
    const auto& i = h_->client->info;
    if (i.label_dtype == STOKER_INT64) return make_capsule(h_, h_->labels, label_dl_type(i), {count()});
    return make_capsule(h_, h_->labels, label_dl_type(i), {count(), i.label_width});
  }
  py::capsule ids_dlpack() const {
    return make_capsule(h_, h_->ids, {dlpack::kDLInt, 64, 1}, {count()});
  }

  // NumPy views: the array's base is a capsule holding the batch, so the slot lives as long
  // as the array; they are marked read-only.
  py::array images_numpy() const {
    const auto& i = h_->client->info;
    const auto s = image_shape();
    py::dtype dt = i.dtype == STOKER_UINT8 ? py::dtype("uint8") : i.dtype == STOKER_FLOAT16 ? py::dtype("float16") : py::dtype("float32");
    return view(dt, {s[0], s[1], s[2], s[3]}, h_->images);
  }
  py::array labels_numpy() const {
    const auto& i = h_->client->info;
    if (i.label_dtype == STOKER_INT64) return view(py::dtype("int64"), {count()}, h_->labels);
    return view(py::dtype(dtype_name(i.label_dtype)), {count(), i.label_width}, h_->labels);
  }
  py::array ids_numpy() const { return view(py::dtype("int64"), {count()}, h_->ids); }

 private:
  template <class F>
  void device_pointer(std::uintptr_t, F&& get) const {
    if (h_->is_released.load()) {
      PyErr_SetString(g_errors[STOKER_ERR_INVALID_ARGUMENT], "batch already released");
      throw py::error_already_set();
    }
    stoker_status st;
    {
      py::gil_scoped_release nogil;
      st = get();
      if (st == STOKER_OK && h_->client->info.device_backend == 2) {
        st = stoker_batch_device_synchronize(h_->batch);  // the CPU reads simulated memory
      }
    }
    if (st != STOKER_OK) raise_status(st);
  }
  dlpack::DLDevice where() const {
    const auto& i = h_->client->info;
    if (i.device_backend == 1) return {dlpack::kDLCUDA, i.device_ordinal};
    return {dlpack::kDLCPU, 0};
  }
  py::array view(py::dtype dt, std::vector<py::ssize_t> shape, const void* data) const {
    auto* keep = new std::shared_ptr<BatchHandle>(h_);
    py::capsule base(keep, [](void* p) { delete static_cast<std::shared_ptr<BatchHandle>*>(p); });
    py::array a(dt, shape, {}, data, base);
    a.attr("setflags")(py::arg("write") = false);  // the daemon's memory: read it, never write it
    return a;
  }
  std::shared_ptr<BatchHandle> h_;
};

class Client {
 public:
  Client(const std::string& job, std::uint32_t rank, const std::string& socket, std::uint64_t start_epoch,
         std::uint64_t start_batch, bool writable, const std::string& device, std::uint32_t reader,
         bool split_rank, std::uint64_t start_position)
      : s_(std::make_shared<ClientState>()) {
    stoker_options o;
    stoker_options_init(&o);
    o.socket_path = socket.empty() ? nullptr : socket.c_str();
    o.job = job.c_str();
    o.rank = rank;
    o.reader = reader;
    o.split_rank = split_rank ? 1 : 0;
    o.start_epoch = start_epoch;
    o.start_batch = start_batch;
    o.start_position = start_position;
    o.map_writable = writable ? 1 : 0;
    o.device = device.empty() ? nullptr : device.c_str();
    stoker_status st;
    {
      py::gil_scoped_release nogil;
      st = stoker_client_open(&o, &s_->client);
    }
    if (st != STOKER_OK) raise_status(st);
    stoker_client_info(s_->client, &s_->info);
  }

  // Blocks up to timeout_ms (<0: forever) without the GIL.
  Batch next(int timeout_ms) {
    stoker_batch* b = nullptr;
    stoker_status st = STOKER_OK;
    bool closed = false;
    {
      py::gil_scoped_release nogil;
      stoker::base::MutexLock lock(s_->mu);
      if (s_->client == nullptr) {
        closed = true;
      } else {
        st = stoker_client_next(s_->client, timeout_ms, &b);
      }
    }
    if (closed) {
      PyErr_SetString(g_errors[STOKER_ERR_DISCONNECTED], "client is closed");
      throw py::error_already_set();
    }
    if (st != STOKER_OK) raise_status(st);
    s_->outstanding.fetch_add(1);
    return Batch(std::make_shared<BatchHandle>(b, s_));
  }

  int outstanding() const { return s_->outstanding.load(); }

  void pin_memory(int ordinal) {
    stoker_status st;
    {
      py::gil_scoped_release nogil;
      stoker::base::MutexLock lock(s_->mu);
      st = s_->client == nullptr ? STOKER_ERR_DISCONNECTED : stoker_client_pin_memory(s_->client, ordinal);
    }
    if (st != STOKER_OK) raise_status(st);
  }

  // Outstanding batches stay mapped (the C API keeps the mapping until each is released).
  void close() {
    py::gil_scoped_release nogil;
    stoker::base::MutexLock lock(s_->mu);
    if (s_->client != nullptr) {
      stoker_client_close(s_->client);
      s_->client = nullptr;
    }
  }

  py::dict info() const {
    const auto& i = s_->info;
    py::dict d;
    d["batch_size"] = i.batch_size;
    d["channels"] = i.channels;
    d["height"] = i.height;
    d["width"] = i.width;
    d["dtype"] = i.dtype == STOKER_UINT8 ? "uint8" : i.dtype == STOKER_FLOAT16 ? "float16" : "float32";
    d["layout"] = i.layout == STOKER_NCHW ? "NCHW" : "NHWC";
    d["samples_per_epoch"] = i.samples_per_epoch;
    d["samples_per_rank"] = i.samples_per_rank;
    d["batches_per_epoch"] = i.batches_per_epoch;
    d["num_classes"] = i.num_classes;
    d["label_dtype"] = dtype_name(i.label_dtype);  // "int64", or a float type for soft labels
    d["label_width"] = i.label_width;              // 1, or num_classes for soft labels
    d["slot_count"] = i.slot_count;
    d["daemon_generation"] = i.daemon_generation;
    d["device_ordinal"] = i.device_ordinal;
    d["device_dtype"] = i.device_dtype == STOKER_UINT8 ? "uint8" : i.device_dtype == STOKER_FLOAT16 ? "float16" : "float32";
    d["device_backend"] = i.device_backend == 1 ? "cuda" : i.device_backend == 2 ? "hostsim" : "";
    d["device_normalized"] = i.device_normalized != 0;
    d["readers"] = i.readers;
    d["reader"] = i.reader;
    d["rank"] = i.rank;
    d["writable"] = i.writable != 0;
    return d;
  }

 private:
  std::shared_ptr<ClientState> s_;
};

}  // namespace

PYBIND11_MODULE(_stoker, m) {
  m.doc() = "Native layer of the stoker client (see the stoker package)";
  m.attr("__version__") = STOKER_VERSION;
  py::object base = py::reinterpret_steal<py::object>(
      PyErr_NewException("stoker.StokerError", PyExc_RuntimeError, nullptr));
  m.attr("StokerError") = base;
  auto sub = [&](const char* name, stoker_status s, PyObject* extra_base = nullptr) {
    PyObject* bases = extra_base ? PyTuple_Pack(2, base.ptr(), extra_base) : PyTuple_Pack(1, base.ptr());
    PyObject* cls = PyErr_NewException((std::string("stoker.") + name).c_str(), bases, nullptr);
    Py_DECREF(bases);
    m.attr(name) = py::reinterpret_steal<py::object>(cls);
    g_errors[s] = cls;
  };
  g_errors[STOKER_ERR_INTERNAL] = base.ptr();
  g_errors[STOKER_ERR_INVALID_ARGUMENT] = base.ptr();
  g_errors[STOKER_ERR_PROTOCOL] = base.ptr();
  sub("NoDaemonError", STOKER_ERR_NO_DAEMON, PyExc_ConnectionError);
  sub("RefusedError", STOKER_ERR_REFUSED);
  sub("VersionError", STOKER_ERR_VERSION);
  sub("DisconnectedError", STOKER_ERR_DISCONNECTED, PyExc_ConnectionError);
  sub("TimeoutError", STOKER_ERR_TIMEOUT, PyExc_TimeoutError);
  sub("JobFailedError", STOKER_ERR_JOB_FAILED);

  py::class_<Batch>(m, "Batch")
      .def_property_readonly("epoch", &Batch::epoch)
      .def_property_readonly("index", &Batch::index)
      .def_property_readonly("count", &Batch::count)
      .def_property_readonly("last", &Batch::last)
      .def("release", &Batch::release, "Give the slot back now (tensors of it must not be used after)")
      .def_property_readonly("released", &Batch::released)
      .def("images_dlpack", &Batch::images_dlpack)
      .def("labels_dlpack", &Batch::labels_dlpack)
      .def("ids_dlpack", &Batch::ids_dlpack)
      .def_property_readonly("on_device", &Batch::on_device)
      .def("device_images_dlpack", &Batch::device_images_dlpack, py::arg("stream") = 0)
      .def("device_labels_dlpack", &Batch::device_labels_dlpack, py::arg("stream") = 0)
      .def("images_numpy", &Batch::images_numpy)
      .def("labels_numpy", &Batch::labels_numpy)
      .def("ids_numpy", &Batch::ids_numpy);

  py::class_<Client>(m, "Client")
      .def(py::init<const std::string&, std::uint32_t, const std::string&, std::uint64_t, std::uint64_t, bool,
                    const std::string&, std::uint32_t, bool, std::uint64_t>(),
           py::arg("job"), py::arg("rank") = 0, py::arg("socket") = "", py::arg("start_epoch") = 0,
           py::arg("start_batch") = 0, py::arg("writable") = true, py::arg("device") = "",
           py::arg("reader") = 0, py::arg("split_rank") = false, py::arg("start_position") = 0)
      .def("pin_memory", &Client::pin_memory, py::arg("ordinal"))
      .def("next", &Client::next, py::arg("timeout_ms") = -1)
      .def("info", &Client::info)
      .def("close", &Client::close)
      .def_property_readonly("outstanding", &Client::outstanding);

  m.def("daemon_status", [](const std::string& socket) {
    char* json = nullptr;
    const stoker_status st = stoker_daemon_status(socket.empty() ? nullptr : socket.c_str(), &json);
    if (st != STOKER_OK) raise_status(st);
    std::string s(json);
    stoker_free(json);
    return s;
  }, py::arg("socket") = "");

  m.def("daemon_command", [](const std::string& socket, const std::string& request, int timeout_ms) {
    char* json = nullptr;
    stoker_status st;
    {
      py::gil_scoped_release unlocked;  // a job definition waits for its dataset scan
      st = stoker_daemon_command(socket.empty() ? nullptr : socket.c_str(), request.c_str(), timeout_ms, &json);
    }
    if (st != STOKER_OK) raise_status(st);
    std::string s(json);
    stoker_free(json);
    return s;
  }, py::arg("socket"), py::arg("request"), py::arg("timeout_ms") = 600000);
}
