// _stoker: the native half of `import stoker`. A thin layer over libstoker's C API:
//  - Client.next() takes a batch already here holding the GIL, and waits for one without it
//    (client_object.cpp);
//  - batches are exported zero-copy, as DLPack capsules (torch) or read-only NumPy views;
//  - a batch's slot goes back to the daemon when the last Python object or tensor that
//    refers to it dies, or at once on Batch.release() (batch_object.cpp).
#include <string>

#include "binding.hpp"

namespace stoker::python {

PyObject* g_errors[kStatusCount] = {};

PyObject* status_error(stoker_status s) noexcept {
  PyObject* cls = (s >= 0 && s < kStatusCount && g_errors[s] != nullptr) ? g_errors[s] : g_errors[STOKER_ERR_INTERNAL];
  PyErr_SetString(cls, stoker_last_error());
  return nullptr;
}

void raise_status(stoker_status s) {
  status_error(s);
  throw py::error_already_set();
}

void set_python_error() noexcept {
  try {
    throw;
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (const py::builtin_exception& e) {
    e.set_error();
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "unknown C++ exception");
  }
}

}  // namespace stoker::python

namespace py = pybind11;
namespace sp = stoker::python;

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
    sp::g_errors[s] = cls;
  };
  sp::g_errors[STOKER_ERR_INTERNAL] = base.ptr();
  sp::g_errors[STOKER_ERR_INVALID_ARGUMENT] = base.ptr();
  sp::g_errors[STOKER_ERR_PROTOCOL] = base.ptr();
  sub("NoDaemonError", STOKER_ERR_NO_DAEMON, PyExc_ConnectionError);
  sub("RefusedError", STOKER_ERR_REFUSED);
  sub("VersionError", STOKER_ERR_VERSION);
  sub("DisconnectedError", STOKER_ERR_DISCONNECTED, PyExc_ConnectionError);
  sub("TimeoutError", STOKER_ERR_TIMEOUT, PyExc_TimeoutError);
  sub("JobFailedError", STOKER_ERR_JOB_FAILED);

  sp::add_batch_type(m);
  sp::add_client_type(m);

  m.def("daemon_status", [](const std::string& socket) {
    char* json = nullptr;
    const stoker_status st = stoker_daemon_status(socket.empty() ? nullptr : socket.c_str(), &json);
    if (st != STOKER_OK) sp::raise_status(st);
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
    if (st != STOKER_OK) sp::raise_status(st);
    std::string s(json);
    stoker_free(json);
    return s;
  }, py::arg("socket"), py::arg("request"), py::arg("timeout_ms") = 600000);
}
