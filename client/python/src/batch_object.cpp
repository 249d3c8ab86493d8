// _stoker.Batch: one leased slot as Python sees it. Its pixels, labels and ids are exported
// zero-copy, as DLPack capsules (torch) or read-only NumPy views; the slot goes back to the
// daemon when the last Python object or tensor that refers to it dies, or at once on release().
#include <pybind11/numpy.h>

#include <new>
#include <utility>
#include <vector>

#include "binding.hpp"
#include "dlpack_abi.hpp"

namespace stoker::python {

BatchHandle::BatchHandle(stoker_batch* b, std::shared_ptr<ClientState> c)
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

void BatchHandle::release() {
  std::call_once(released, [&] {
    stoker_batch_release(batch);  // safe after the client was closed
    is_released.store(true);
    client->outstanding.fetch_sub(1);
  });
}

namespace {

std::int64_t dtype_bits(stoker_dtype t) {
  return t == STOKER_UINT8 ? 8 : t == STOKER_FLOAT16 ? 16 : t == STOKER_INT64 ? 64 : 32;
}

// Labels: int64 class indices, or (mixup/cutmix jobs) float soft targets of label_width.
dlpack::DLDataType label_dl_type(const stoker_job_info& i) {
  const std::uint8_t code = i.label_dtype == STOKER_INT64 ? dlpack::kDLInt : dlpack::kDLFloat;
  return {code, static_cast<std::uint8_t>(dtype_bits(i.label_dtype)), 1};
}

// A DLPack tensor owning a shared reference to its batch.
struct DLPackOwner {
  dlpack::DLManagedTensor managed;
  std::shared_ptr<BatchHandle> batch;
  std::int64_t shape[4];
};

void dlpack_deleter(dlpack::DLManagedTensor* t) { delete static_cast<DLPackOwner*>(t->manager_ctx); }

// Capsule destructor: only frees the tensor if no consumer took it (renamed "used_dltensor").
void capsule_destructor(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    auto* t = static_cast<dlpack::DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
    if (t != nullptr && t->deleter != nullptr) t->deleter(t);
  }
}

py::capsule make_capsule(const std::shared_ptr<BatchHandle>& b, const void* data, dlpack::DLDataType dt,
                         std::initializer_list<std::int64_t> shape, dlpack::DLDevice device = {dlpack::kDLCPU, 0}) {
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

// What the Batch type's methods export (capsules, arrays), on the batch's shared handle.
class Exports {
 public:
  explicit Exports(const std::shared_ptr<BatchHandle>& h) : h_(h) {}

  std::vector<std::int64_t> image_shape() const {
    const auto& i = h_->client->info;
    const std::int64_t n = h_->count;
    if (i.layout == STOKER_NCHW) return {n, i.channels, i.height, i.width};
    return {n, i.height, i.width, i.channels};
  }

  py::capsule images_dlpack() const {
    const auto s = image_shape();
    const dlpack::DLDataType dt{h_->client->info.dtype == STOKER_UINT8 ? dlpack::kDLUInt : dlpack::kDLFloat,
                                static_cast<std::uint8_t>(dtype_bits(h_->client->info.dtype)), 1};
    return make_capsule(h_, h_->images, dt, {s[0], s[1], s[2], s[3]});
  }

  // Device batches: the capsules view the device copy, ordered on `stream` (the trainer's
  // current cudaStream_t; 0: legacy default) by a GPU wait. Under the hostsim backend the
  // memory is host memory: the stream is synchronized and the capsule says kDLCPU.
  py::capsule device_images_dlpack(std::uintptr_t stream) const {
    void* p = nullptr;
    device_pointer([&] { return stoker_batch_device_images(h_->batch, reinterpret_cast<void*>(stream), &p); });
    const auto& i = h_->client->info;
    const auto s = image_shape();
    const dlpack::DLDataType dt{i.device_dtype == STOKER_UINT8 ? dlpack::kDLUInt : dlpack::kDLFloat,
                                static_cast<std::uint8_t>(dtype_bits(i.device_dtype)), 1};
    return make_capsule(h_, p, dt, {s[0], s[1], s[2], s[3]}, where());
  }
  py::capsule device_labels_dlpack(std::uintptr_t stream) const {
    void* p = nullptr;
    device_pointer([&] { return stoker_batch_device_label_data(h_->batch, reinterpret_cast<void*>(stream), &p); });
    const auto& i = h_->client->info;
    if (i.label_dtype == STOKER_INT64) return make_capsule(h_, p, label_dl_type(i), {h_->count}, where());
    return make_capsule(h_, p, label_dl_type(i), {h_->count, i.label_width}, where());
  }

  // [count] int64, or [count, num_classes] float for a mixing job (same dtype as the images,
  // float32 for uint8 images).
  py::capsule labels_dlpack() const {
    const auto& i = h_->client->info;
    if (i.label_dtype == STOKER_INT64) return make_capsule(h_, h_->labels, label_dl_type(i), {h_->count});
    return make_capsule(h_, h_->labels, label_dl_type(i), {h_->count, i.label_width});
  }
  py::capsule ids_dlpack() const { return make_capsule(h_, h_->ids, {dlpack::kDLInt, 64, 1}, {h_->count}); }

  // NumPy views: the array's base is a capsule holding the batch, so the slot lives as long
  // as the array; they are marked read-only.
  py::array images_numpy() const {
    const auto& i = h_->client->info;
    const auto s = image_shape();
    return view(numpy_dtype(i.dtype), {s[0], s[1], s[2], s[3]}, h_->images);
  }
  py::array labels_numpy() const {
    const auto& i = h_->client->info;
    if (i.label_dtype == STOKER_INT64) return view(numpy_dtype(STOKER_INT64), {h_->count}, h_->labels);
    return view(numpy_dtype(i.label_dtype), {h_->count, i.label_width}, h_->labels);
  }
  py::array ids_numpy() const { return view(numpy_dtype(STOKER_INT64), {h_->count}, h_->ids); }

 private:
  template <class F>
  void device_pointer(F&& get) const {
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
  // A dtype by stoker type, made once (by name, once per type) and kept for the process:
  // building one from its name on every call cost more than the rest of a view.
  static py::dtype numpy_dtype(stoker_dtype t) {
    static PyObject* made[4] = {};  // by stoker_dtype; never freed (outlives the interpreter)
    const int k = t == STOKER_UINT8 ? 0 : t == STOKER_FLOAT16 ? 1 : t == STOKER_INT64 ? 2 : 3;
    if (made[k] == nullptr) made[k] = py::dtype(dtype_name(t)).release().ptr();
    return py::reinterpret_borrow<py::dtype>(made[k]);
  }
  py::array view(const py::dtype& dt, std::vector<py::ssize_t> shape, const void* data) const {
    auto* keep = new std::shared_ptr<BatchHandle>(h_);
    py::capsule base(keep, [](void* p) { delete static_cast<std::shared_ptr<BatchHandle>*>(p); });
    py::array a(dt, shape, {}, data, base);
    // The daemon's memory: read it, never write it. Clearing WRITEABLE directly is what
    // a.setflags(write=False) does, without a Python call (NumPy allows clearing it).
    py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
    return a;
  }
  const std::shared_ptr<BatchHandle>& h_;
};

// The Python object. Invariant: `h` is set from creation (new_batch) to tp_dealloc.
struct BatchObject {
  PyObject_HEAD std::shared_ptr<BatchHandle> h;
};

PyTypeObject* g_batch_type = nullptr;

const std::shared_ptr<BatchHandle>& handle_of(PyObject* self) { return reinterpret_cast<BatchObject*>(self)->h; }

void batch_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  reinterpret_cast<BatchObject*>(self)->h.~shared_ptr();  // the last owner gives the slot back
  type->tp_free(self);
  Py_DECREF(type);  // a heap type's instances hold a reference to it
}

// Read-only attributes.
PyObject* get_epoch(PyObject* self, void*) { return PyLong_FromUnsignedLongLong(handle_of(self)->epoch); }
PyObject* get_index(PyObject* self, void*) { return PyLong_FromUnsignedLongLong(handle_of(self)->index); }
PyObject* get_count(PyObject* self, void*) { return PyLong_FromUnsignedLong(handle_of(self)->count); }
PyObject* get_last(PyObject* self, void*) { return PyBool_FromLong(handle_of(self)->last); }
PyObject* get_released(PyObject* self, void*) { return PyBool_FromLong(handle_of(self)->is_released.load()); }
PyObject* get_on_device(PyObject* self, void*) { return PyBool_FromLong(handle_of(self)->on_device); }

PyObject* batch_release(PyObject* self, PyObject*) {
  handle_of(self)->release();
  Py_RETURN_NONE;
}

// A method without arguments that returns what `f(view)` returns.
template <auto Method>
PyObject* no_args(PyObject* self, PyObject*) {
  return guarded<PyObject*>(nullptr, [&] { return (Exports(handle_of(self)).*Method)().release().ptr(); });
}

// device_*_dlpack(stream=0).
template <auto Method>
PyObject* with_stream(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* names[] = {"stream", nullptr};
  unsigned long long stream = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|K", const_cast<char**>(names), &stream)) return nullptr;
  return guarded<PyObject*>(
      nullptr, [&] { return (Exports(handle_of(self)).*Method)(static_cast<std::uintptr_t>(stream)).release().ptr(); });
}

PyGetSetDef batch_getset[] = {
    {"epoch", get_epoch, nullptr, nullptr, nullptr},       {"index", get_index, nullptr, nullptr, nullptr},
    {"count", get_count, nullptr, nullptr, nullptr},       {"last", get_last, nullptr, nullptr, nullptr},
    {"released", get_released, nullptr, nullptr, nullptr}, {"on_device", get_on_device, nullptr, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

#define STOKER_KW_METHOD(f) reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(f))
PyMethodDef batch_methods[] = {
    {"release", batch_release, METH_NOARGS, "Give the slot back now (tensors of it must not be used after)"},
    {"images_dlpack", no_args<&Exports::images_dlpack>, METH_NOARGS, nullptr},
    {"labels_dlpack", no_args<&Exports::labels_dlpack>, METH_NOARGS, nullptr},
    {"ids_dlpack", no_args<&Exports::ids_dlpack>, METH_NOARGS, nullptr},
    {"device_images_dlpack", STOKER_KW_METHOD(with_stream<&Exports::device_images_dlpack>),
     METH_VARARGS | METH_KEYWORDS, nullptr},
    {"device_labels_dlpack", STOKER_KW_METHOD(with_stream<&Exports::device_labels_dlpack>),
     METH_VARARGS | METH_KEYWORDS, nullptr},
    {"images_numpy", no_args<&Exports::images_numpy>, METH_NOARGS, nullptr},
    {"labels_numpy", no_args<&Exports::labels_numpy>, METH_NOARGS, nullptr},
    {"ids_numpy", no_args<&Exports::ids_numpy>, METH_NOARGS, nullptr},
    {nullptr, nullptr, 0, nullptr},
};
#undef STOKER_KW_METHOD

}  // namespace

PyObject* new_batch(stoker_batch* b, const std::shared_ptr<ClientState>& client) noexcept {
  client->outstanding.fetch_add(1);
  std::shared_ptr<BatchHandle> h;
  try {
    h = std::make_shared<BatchHandle>(b, client);
  } catch (const std::bad_alloc&) {
    stoker_batch_release(b);
    client->outstanding.fetch_sub(1);
    return PyErr_NoMemory();
  }
  auto* o = PyObject_New(BatchObject, g_batch_type);
  if (o == nullptr) return nullptr;  // `h` goes here, and with it the slot
  new (&o->h) std::shared_ptr<BatchHandle>(std::move(h));
  return reinterpret_cast<PyObject*>(o);
}

void add_batch_type(py::module_& m) {
  static PyType_Slot slots[] = {
      {Py_tp_dealloc, reinterpret_cast<void*>(batch_dealloc)},
      {Py_tp_getset, batch_getset},
      {Py_tp_methods, batch_methods},
      {Py_tp_doc, const_cast<char*>("One leased batch of a job's ring (from Client.next)")},
      {0, nullptr},
  };
  static PyType_Spec spec = {"stoker._stoker.Batch", sizeof(BatchObject), 0,
                             Py_TPFLAGS_DEFAULT | Py_TPFLAGS_DISALLOW_INSTANTIATION, slots};
  PyObject* type = PyType_FromSpec(&spec);
  if (type == nullptr) throw py::error_already_set();
  g_batch_type = reinterpret_cast<PyTypeObject*>(type);  // the module's reference keeps it
  m.attr("Batch") = py::reinterpret_steal<py::object>(type);
}

}  // namespace stoker::python
