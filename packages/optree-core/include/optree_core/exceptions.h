// Raising Python exceptions from C++ with a formatted message.
#pragma once

#include <Python.h>
#include <nanobind/nanobind.h>

#include <string>

namespace optree_core {

// Sets the Python error indicator and throws so nanobind propagates the exception unchanged.
[[noreturn]] inline void RaisePython(PyObject* type, const std::string& message) {
  PyErr_SetString(type, message.c_str());
  throw nanobind::python_error();
}

// Throws if a Python error is pending (for C-API calls that signal failure through it).
inline void ThrowIfPythonError() {
  if (PyErr_Occurred()) throw nanobind::python_error();
}

// repr() of an object as std::string; never throws (falls back to a placeholder).
std::string SafeRepr(nanobind::handle obj);

}  // namespace optree_core
