// _stoker.Client: one consumer's connection to stokerd. next() takes a batch that stokerd has
// already announced holding the GIL (stoker_client_try_next: nothing to wait for, so releasing
// and retaking the GIL would cost more than the hand-over), and waits for one without it.
#include <climits>
#include <new>
#include <string>

#include "binding.hpp"

namespace stoker::python {
namespace {

// The Python object. Invariant: `s` is constructed by tp_new and destroyed by tp_dealloc; it
// is null until __init__ opened the connection.
struct ClientObject {
  PyObject_HEAD std::shared_ptr<ClientState> s;
};

PyObject* client_new(PyTypeObject* type, PyObject*, PyObject*) {
  PyObject* self = type->tp_alloc(type, 0);
  if (self != nullptr) new (&reinterpret_cast<ClientObject*>(self)->s) std::shared_ptr<ClientState>();
  return self;
}

void client_dealloc(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  // The last reference (outstanding batches hold theirs) closes the connection.
  reinterpret_cast<ClientObject*>(self)->s.~shared_ptr();
  type->tp_free(self);
  Py_DECREF(type);
}

// An unsigned integer argument that must fit `max` (a negative or too large one is an error,
// not a wrapped-around rank).
template <class T>
int to_unsigned(PyObject* o, void* out) {
  const unsigned long long v = PyLong_AsUnsignedLongLong(o);
  if (v == static_cast<unsigned long long>(-1) && PyErr_Occurred()) return 0;
  if (v > static_cast<unsigned long long>(static_cast<T>(-1))) {
    PyErr_SetString(PyExc_OverflowError, "value out of range");
    return 0;
  }
  *static_cast<T*>(out) = static_cast<T>(v);
  return 1;
}

// Client(job, rank=0, socket="", start_epoch=0, start_batch=0, writable=True, device="",
//        reader=0, split_rank=False, start_position=0)
int client_init(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* names[] = {"job",    "rank",   "socket",     "start_epoch",    "start_batch", "writable",
                                "device", "reader", "split_rank", "start_position", nullptr};
  const char* job = nullptr;
  const char* socket = "";
  const char* device = "";
  std::uint32_t rank = 0, reader = 0;
  std::uint64_t start_epoch = 0, start_batch = 0, start_position = 0;
  int writable = 1, split_rank = 0;
  if (!PyArg_ParseTupleAndKeywords(
          args, kwargs, "s|O&sO&O&psO&pO&", const_cast<char**>(names), &job, to_unsigned<std::uint32_t>, &rank, &socket,
          to_unsigned<std::uint64_t>, &start_epoch, to_unsigned<std::uint64_t>, &start_batch, &writable, &device,
          to_unsigned<std::uint32_t>, &reader, &split_rank, to_unsigned<std::uint64_t>, &start_position)) {
    return -1;
  }
  auto& s = reinterpret_cast<ClientObject*>(self)->s;
  if (s != nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "Client is already open");
    return -1;
  }
  return guarded(-1, [&] {
    auto state = std::make_shared<ClientState>();
    stoker_options o;
    stoker_options_init(&o);
    o.socket_path = socket[0] == '\0' ? nullptr : socket;
    o.job = job;
    o.rank = rank;
    o.reader = reader;
    o.split_rank = split_rank ? 1 : 0;
    o.start_epoch = start_epoch;
    o.start_batch = start_batch;
    o.start_position = start_position;
    o.map_writable = writable ? 1 : 0;
    o.device = device[0] == '\0' ? nullptr : device;
    stoker_status st;
    stoker_client* c = nullptr;
    {
      py::gil_scoped_release nogil;
      st = stoker_client_open(&o, &c);
    }
    if (st != STOKER_OK) raise_status(st);
    {
      base::MutexLock lock(state->mu);
      state->client = c;
    }
    stoker_client_info(c, &state->info);
    s = std::move(state);
    return 0;
  });
}

// The state of an opened client; nullptr with a Python error for one __init__ never opened.
const std::shared_ptr<ClientState>* opened(PyObject* self) {
  const auto& s = reinterpret_cast<ClientObject*>(self)->s;
  if (s == nullptr) {
    PyErr_SetString(g_errors[STOKER_ERR_DISCONNECTED], "client is not open");
    return nullptr;
  }
  return &s;
}

PyObject* closed_error() {
  PyErr_SetString(g_errors[STOKER_ERR_DISCONNECTED], "client is closed");
  return nullptr;
}

// next(timeout_ms=-1): the next batch, waiting up to timeout_ms (<0: forever) without the GIL.
PyObject* client_next(PyObject* self, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  // Arguments by hand (METH_FASTCALL: no tuple or dict is built for the common call).
  PyObject* timeout = nargs == 1 ? args[0] : nullptr;
  if (nargs > 1) {
    PyErr_SetString(PyExc_TypeError, "next() takes at most 1 argument (timeout_ms)");
    return nullptr;
  }
  for (Py_ssize_t i = 0; kwnames != nullptr && i < PyTuple_GET_SIZE(kwnames); ++i) {
    PyObject* name = PyTuple_GET_ITEM(kwnames, i);
    if (timeout != nullptr || PyUnicode_CompareWithASCIIString(name, "timeout_ms") != 0) {
      PyErr_Format(PyExc_TypeError, "next() got an unexpected or repeated argument '%U'", name);
      return nullptr;
    }
    timeout = args[nargs + i];
  }
  int timeout_ms = -1;
  if (timeout != nullptr) {
    const long t = PyLong_AsLong(timeout);
    if (t == -1 && PyErr_Occurred()) return nullptr;
    if (t < INT_MIN || t > INT_MAX) {
      PyErr_SetString(PyExc_OverflowError, "timeout_ms out of range");
      return nullptr;
    }
    timeout_ms = static_cast<int>(t);
  }
  const auto* sp = opened(self);
  if (sp == nullptr) return nullptr;
  ClientState& s = **sp;
  stoker_batch* b = nullptr;
  stoker_status st = STOKER_ERR_TIMEOUT;
  // A batch already here: taken holding the GIL. The lock is only tried: a close() or another
  // next() holding it runs without the GIL, and this thread must not wait for it holding it.
  if (s.mu.try_lock()) {
    if (s.client == nullptr) {
      s.mu.unlock();
      return closed_error();
    }
    st = stoker_client_try_next(s.client, &b);
    s.mu.unlock();
  }
  if (st == STOKER_ERR_TIMEOUT) {
    bool closed = false;
    {
      py::gil_scoped_release nogil;
      base::MutexLock lock(s.mu);
      if (s.client == nullptr) {
        closed = true;
      } else {
        st = stoker_client_next(s.client, timeout_ms, &b);
      }
    }
    if (closed) return closed_error();
  }
  if (st != STOKER_OK) return status_error(st);
  return new_batch(b, *sp);
}

PyObject* client_pin_memory(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* names[] = {"ordinal", nullptr};
  int ordinal = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "i", const_cast<char**>(names), &ordinal)) return nullptr;
  const auto* sp = opened(self);
  if (sp == nullptr) return nullptr;
  ClientState& s = **sp;
  stoker_status st;
  {
    py::gil_scoped_release nogil;
    base::MutexLock lock(s.mu);
    st = s.client == nullptr ? STOKER_ERR_DISCONNECTED : stoker_client_pin_memory(s.client, ordinal);
  }
  if (st != STOKER_OK) return status_error(st);
  Py_RETURN_NONE;
}

// Outstanding batches stay mapped (the C API keeps the mapping until each is released).
PyObject* client_close(PyObject* self, PyObject*) {
  const auto& s = reinterpret_cast<ClientObject*>(self)->s;
  if (s != nullptr) {
    py::gil_scoped_release nogil;
    base::MutexLock lock(s->mu);
    if (s->client != nullptr) {
      stoker_client_close(s->client);
      s->client = nullptr;
    }
  }
  Py_RETURN_NONE;
}

PyObject* client_info(PyObject* self, PyObject*) {
  const auto* sp = opened(self);
  if (sp == nullptr) return nullptr;
  return guarded<PyObject*>(nullptr, [&] {
    const auto& i = (*sp)->info;
    py::dict d;
    d["batch_size"] = i.batch_size;
    d["channels"] = i.channels;
    d["height"] = i.height;
    d["width"] = i.width;
    d["dtype"] = dtype_name(i.dtype);
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
    d["device_dtype"] = i.device_dtype == STOKER_UINT8     ? "uint8"
                        : i.device_dtype == STOKER_FLOAT16 ? "float16"
                                                           : "float32";
    d["device_backend"] = i.device_backend == 1 ? "cuda" : i.device_backend == 2 ? "hostsim" : "";
    d["device_normalized"] = i.device_normalized != 0;
    d["readers"] = i.readers;
    d["reader"] = i.reader;
    d["rank"] = i.rank;
    d["writable"] = i.writable != 0;
    return d.release().ptr();
  });
}

PyObject* get_outstanding(PyObject* self, void*) {
  const auto& s = reinterpret_cast<ClientObject*>(self)->s;
  return PyLong_FromLong(s == nullptr ? 0 : s->outstanding.load());
}

PyGetSetDef client_getset[] = {
    {"outstanding", get_outstanding, nullptr, "batches handed out and not yet released", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

#define STOKER_METHOD(f) reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(f))
PyMethodDef client_methods[] = {
    {"next", STOKER_METHOD(client_next), METH_FASTCALL | METH_KEYWORDS,
     "next(timeout_ms=-1): the next batch; waits up to timeout_ms (<0: forever) without the GIL"},
    {"pin_memory", STOKER_METHOD(client_pin_memory), METH_VARARGS | METH_KEYWORDS, nullptr},
    {"info", client_info, METH_NOARGS, nullptr},
    {"close", client_close, METH_NOARGS, nullptr},
    {nullptr, nullptr, 0, nullptr},
};
#undef STOKER_METHOD

}  // namespace

void add_client_type(py::module_& m) {
  static PyType_Slot slots[] = {
      {Py_tp_new, reinterpret_cast<void*>(client_new)},
      {Py_tp_init, reinterpret_cast<void*>(client_init)},
      {Py_tp_dealloc, reinterpret_cast<void*>(client_dealloc)},
      {Py_tp_getset, client_getset},
      {Py_tp_methods, client_methods},
      {Py_tp_doc, const_cast<char*>("Client(job, rank=0, socket='', start_epoch=0, start_batch=0, writable=True, "
                                    "device='', reader=0, split_rank=False, start_position=0)")},
      {0, nullptr},
  };
  static PyType_Spec spec = {"stoker._stoker.Client", sizeof(ClientObject), 0, Py_TPFLAGS_DEFAULT, slots};
  PyObject* type = PyType_FromSpec(&spec);
  if (type == nullptr) throw py::error_already_set();
  m.attr("Client") = py::reinterpret_steal<py::object>(type);
}

}  // namespace stoker::python
