// pystack.cpp — Python frames through the CPython C API, resolved with dlsym at run time.
// Taken only when a violation is reported. The call may come from a thread that released the
// GIL (torch releases it around operators): PyGILState_Ensure takes it back for the walk; the
// thread's last Python frame is still recorded in its thread state.
#include "pystack.h"

#include <dlfcn.h>

#include <string>

namespace fumi {
namespace {

using PyObj = void;

struct PythonApi {
  int (*isInitialized)();
  int (*gilEnsure)();
  void (*gilRelease)(int);
  PyObj* (*getFrame)();
  int (*frameLine)(PyObj*);
  PyObj* (*frameCode)(PyObj*);   // new reference
  PyObj* (*frameBack)(PyObj*);   // new reference
  PyObj* (*getAttr)(PyObj*, const char*);  // new reference
  const char* (*utf8)(PyObj*);
  void (*decRef)(PyObj*);
  void (*errClear)();
  bool ok = false;
};

template <class F>
bool lookup(F& fn, const char* name) {
  void* p = dlsym(RTLD_DEFAULT, name);
  fn = reinterpret_cast<F>(p);
  return p != nullptr;
}

const PythonApi& api() {
  static const PythonApi a = [] {
    PythonApi r{};
    r.ok = lookup(r.isInitialized, "Py_IsInitialized") &&
           lookup(r.gilEnsure, "PyGILState_Ensure") &&
           lookup(r.gilRelease, "PyGILState_Release") &&
           lookup(r.getFrame, "PyEval_GetFrame") &&
           lookup(r.frameLine, "PyFrame_GetLineNumber") &&
           lookup(r.frameCode, "PyFrame_GetCode") &&      // 3.9+
           lookup(r.frameBack, "PyFrame_GetBack") &&      // 3.9+
           lookup(r.getAttr, "PyObject_GetAttrString") &&
           lookup(r.utf8, "PyUnicode_AsUTF8") && lookup(r.decRef, "Py_DecRef") &&
           lookup(r.errClear, "PyErr_Clear");
    return r;
  }();
  return a;
}

std::string attrText(const PythonApi& py, PyObj* obj, const char* name) {
  PyObj* v = py.getAttr(obj, name);
  if (!v) {
    py.errClear();
    return "?";
  }
  const char* s = py.utf8(v);
  std::string out = s ? s : "?";
  if (!s) py.errClear();
  py.decRef(v);
  return out;
}

bool isLibraryFile(const std::string& file) {
  return file.find("/dist-packages/") != std::string::npos ||
         file.find("/site-packages/") != std::string::npos ||
         file.find("/lib/python3") != std::string::npos || file.rfind("<frozen", 0) == 0;
}

}  // namespace

std::vector<std::string> capturePythonStack(int depth) {
  std::vector<std::string> user, library;
  const PythonApi& py = api();
  if (!py.ok || depth <= 0 || !py.isInitialized()) return user;
  const int gil = py.gilEnsure();
  PyObj* frame = py.getFrame();  // borrowed; the frames above it are owned (PyFrame_GetBack)
  PyObj* owned = nullptr;
  for (int n = 0; frame && n < 256 && static_cast<int>(user.size() + library.size()) < 4 * depth;
       ++n) {
    PyObj* code = py.frameCode(frame);
    const std::string file = attrText(py, code, "co_filename");
    const std::string func = attrText(py, code, "co_name");
    py.decRef(code);
    std::string line = file + ":" + std::to_string(py.frameLine(frame)) + " in " + func;
    (isLibraryFile(file) ? library : user).push_back(std::move(line));
    PyObj* back = py.frameBack(frame);  // new reference or null
    if (owned) py.decRef(owned);
    owned = back;
    frame = back;
  }
  if (owned) py.decRef(owned);
  py.gilRelease(gil);
  for (std::string& f : library) user.push_back(std::move(f));
  if (static_cast<int>(user.size()) > depth) user.resize(depth);
  return user;
}

}  // namespace fumi
