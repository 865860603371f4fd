// pystack.cpp — Python frames through the CPython C API, resolved with dlsym at run time.
// Taken only when a violation is reported. The call may come from a thread that released the
// GIL (torch releases it around operators): PyGILState_Ensure takes it back for the walk; the
// thread's last Python frame is still recorded in its thread state.
//
// Python places (capturePythonPlace) read the thread's frames the way CPython 3.11 lays them out
// (FUMI_PY_LAYOUT: built against its headers, which give the thread state's and the code
// object's layout; the interpreter frame's is in its internal headers, mirrored below).
#ifdef FUMI_PY_LAYOUT
#include <Python.h>
#endif

#include "pystack.h"

#include "context.h"
#include "site.h"

#include <dlfcn.h>

#include <atomic>
#include <cstring>
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
  // Python places (capturePythonPlace): 3.11+ only.
  void* (*threadState)();                // PyGILState_GetThisThreadState
  void (*incRef)(PyObj*);
  int (*addr2Line)(PyObj*, int);          // PyCode_Addr2Line
  const unsigned long* version = nullptr;  // Py_Version
  bool places = false;
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
    r.version = static_cast<const unsigned long*>(dlsym(RTLD_DEFAULT, "Py_Version"));
#ifdef FUMI_PY_LAYOUT
    // the layout compiled in is this interpreter's (major and minor version)
    r.places = r.ok && r.version && (*r.version >> 16) == (PY_VERSION_HEX >> 16) &&
               lookup(r.threadState, "PyGILState_GetThisThreadState") &&
               lookup(r.incRef, "Py_IncRef") && lookup(r.addr2Line, "PyCode_Addr2Line");
#endif
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

std::string frameText(const std::string& file, int line, const std::string& func) {
  return file + ":" + std::to_string(line) + " in " + func;
}

#ifdef FUMI_PY_LAYOUT
// CPython 3.11's _PyInterpreterFrame (Include/internal/pycore_frame.h), up to the fields read.
struct InterpreterFrame {
  PyObject* f_func;
  PyObject* f_globals;
  PyObject* f_builtins;
  PyObject* f_locals;
  PyCodeObject* f_code;
  PyObject* frame_obj;
  InterpreterFrame* previous;
  _Py_CODEUNIT* prev_instr;
  int stacktop;
  bool is_entry;
  char owner;  // 1: a generator's (FRAME_OWNED_BY_GENERATOR)
};

// The code objects seen, each with whether it is the program's own: an open-addressing table
// read without locks, written with the GIL held (which serialises the writers, also in a
// forked child). A slot holds the code object's address, bit 0 set for the program's own
// (code objects are 8-byte aligned). Each one entered is held for the process: what a place
// keeps stays valid.
constexpr size_t kCodeSlots = 8192;
constexpr size_t kMaxCodes = kCodeSlots / 2;
std::atomic<uintptr_t> g_codes[kCodeSlots];
std::atomic<size_t> g_code_count{0};

enum CodeKind { kUnknown, kProgram, kLibrary };

size_t codeSlot(const void* code) {
  return (reinterpret_cast<uintptr_t>(code) >> 4) * 0x9E3779B97F4A7C15ull >> 51;  // 13 bits
}

CodeKind knownKind(const void* code, size_t& free_slot) {
  const uintptr_t key = reinterpret_cast<uintptr_t>(code);
  for (size_t i = codeSlot(code), n = 0; n < 32; ++n, i = (i + 1) % kCodeSlots) {
    const uintptr_t v = g_codes[i].load(std::memory_order_acquire);
    if (v == 0) {
      free_slot = i;
      return kUnknown;
    }
    if ((v & ~uintptr_t{1}) == key) return (v & 1) ? kProgram : kLibrary;
  }
  free_slot = kCodeSlots;  // crowded: not entered
  return kUnknown;
}

// The first sight of a code object: enters it (GIL held while it does).
CodeKind learnCode(const PythonApi& py, PyCodeObject* code) {
  if (g_code_count.load(std::memory_order_relaxed) >= kMaxCodes) return kUnknown;
  const int gil = py.gilEnsure();
  size_t slot = kCodeSlots;
  CodeKind kind = knownKind(code, slot);  // another thread may have entered it meanwhile
  if (kind == kUnknown && slot < kCodeSlots) {
    const char* file = py.utf8(code->co_filename);
    if (!file) py.errClear();
    kind = file && !isLibraryFile(file) ? kProgram : kLibrary;
    py.incRef(reinterpret_cast<PyObject*>(code));
    g_codes[slot].store(reinterpret_cast<uintptr_t>(code) | (kind == kProgram ? 1u : 0u),
                        std::memory_order_release);
    g_code_count.fetch_add(1, std::memory_order_relaxed);
  }
  py.gilRelease(gil);
  return kind;
}
#endif

}  // namespace

namespace {

std::atomic<const char* (*)()> g_script_frames{nullptr};

const char* scriptFrames() {
  const char* (*frames)() = g_script_frames.load(std::memory_order_acquire);
  return frames ? frames() : nullptr;
}

// The lines of a set_script_frames text.
void appendScriptFrames(const char* text, std::vector<std::string>& frames) {
  for (const char* line = text; line && *line;) {
    const char* end = std::strchr(line, '\n');
    frames.emplace_back(line, end ? static_cast<size_t>(end - line) : std::strlen(line));
    line = end ? end + 1 : nullptr;
  }
}

}  // namespace

void setScriptFrames(const char* (*frames)()) {
  g_script_frames.store(frames, std::memory_order_release);
}

bool programFrame(const std::string& frame) {
  const size_t in = frame.rfind(" in ");
  const size_t colon = in == std::string::npos ? in : frame.rfind(':', in);
  return colon != std::string::npos && !isLibraryFile(frame.substr(0, colon));
}

void capturePythonPlace(fumi_py_place& out) {
  out = fumi_py_place{};
  out.script = scriptFrames();
  out.node = innermostAutogradNode();
#ifdef FUMI_PY_LAYOUT
  const PythonApi& py = api();
  if (!py.places || !py.isInitialized()) return;
  auto* ts = static_cast<PyThreadState*>(py.threadState());
  if (!ts || !ts->cframe) return;
  // The program's frames, innermost first; the innermost others in case it has none there.
  fumi_py_place library{};
  int n = 0, n_library = 0;
  const auto* f = reinterpret_cast<const InterpreterFrame*>(ts->cframe->current_frame);
  for (int hops = 0; f && hops < 128 && n < FUMI_PY_PLACE_FRAMES; ++hops, f = f->previous) {
    PyCodeObject* code = f->f_code;
    if (!code) continue;
    const _Py_CODEUNIT* first = _PyCode_CODE(code);
    // a frame not yet running its code (CPython's _PyFrame_IsIncomplete): not in the stack
    if (f->owner != 1 && f->prev_instr < first + code->_co_firsttraceable) continue;
    size_t slot = kCodeSlots;
    CodeKind kind = knownKind(code, slot);
    if (kind == kUnknown && slot < kCodeSlots) kind = learnCode(py, code);
    const int32_t instr = static_cast<int32_t>(f->prev_instr - first);
    if (kind == kProgram) {
      out.code[n] = code;
      out.instr[n++] = instr;
    } else if (kind == kLibrary && n_library < FUMI_PY_PLACE_FRAMES) {
      library.code[n_library] = code;
      library.instr[n_library++] = instr;
    }
  }
  if (n == 0) out = library;
#endif
}

std::vector<std::string> resolvePythonPlace(const fumi_py_place& place) {
  std::vector<std::string> frames;
  appendScriptFrames(place.script, frames);
  const PythonApi& py = api();
  if (!py.places || !place.code[0] || !py.isInitialized()) return frames;
  const int gil = py.gilEnsure();
  for (int i = 0; i < FUMI_PY_PLACE_FRAMES && place.code[i]; ++i) {
    auto* code = const_cast<PyObj*>(place.code[i]);  // held since capturePythonPlace saw it
    const int line = py.addr2Line(code, place.instr[i] * 2);  // in bytes: 2 per code unit
    frames.push_back(frameText(attrText(py, code, "co_filename"), line,
                               attrText(py, code, "co_name")));
  }
  py.gilRelease(gil);
  return frames;
}

std::vector<std::string> capturePythonStack(int depth) {
  std::vector<std::string> user, library, script;
  if (depth <= 0) return user;
  appendScriptFrames(scriptFrames(), script);  // innermost: an op a scripted function runs
  for (std::string& f : script) (programFrame(f) ? user : library).push_back(std::move(f));
  const PythonApi& py = api();
  if (py.ok && py.isInitialized()) {
    const int gil = py.gilEnsure();
    PyObj* frame = py.getFrame();  // borrowed; the frames above it are owned (PyFrame_GetBack)
    PyObj* owned = nullptr;
    for (int n = 0;
         frame && n < 256 && static_cast<int>(user.size() + library.size()) < 4 * depth; ++n) {
      PyObj* code = py.frameCode(frame);
      const std::string file = attrText(py, code, "co_filename");
      const std::string func = attrText(py, code, "co_name");
      py.decRef(code);
      std::string line = frameText(file, py.frameLine(frame), func);
      (isLibraryFile(file) ? library : user).push_back(std::move(line));
      PyObj* back = py.frameBack(frame);  // new reference or null
      if (owned) py.decRef(owned);
      owned = back;
      frame = back;
    }
    if (owned) py.decRef(owned);
    py.gilRelease(gil);
  }
  for (std::string& f : library) user.push_back(std::move(f));
  if (static_cast<int>(user.size()) > depth) user.resize(depth);
  return user;
}

}  // namespace fumi
