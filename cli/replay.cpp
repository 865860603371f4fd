// replay.cpp — `fumi replay CASE`: one call a `dump` rule recorded (DIR/cases/<pid>-<op>-<index>:
// call.json and the raw operands t<i>.bin) run again alone, under libfumi with the check that
// flagged it, and its outputs compared with the recorded ones. The replay itself runs in a
// child preloaded by runCommand, so that the call goes through libfumi's hook, adapter and
// engine as in the program: `fumi replay-call` for a CPU BLAS GEMM or GEMV, for a PyTorch op
// the program's Python running replay_torch.py (written into the replay's directory). Each
// child writes the call's outputs as DIR/replayed-t<i>.bin. Usage and exit codes: docs/cli.md.
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "event_report.h"
#include "fumi/dtype.hpp"
#include "paths.h"
#include "settings.h"

namespace fumi::cli {

const char* replayTorchScript();  // replay_torch.py, embedded (replay_torch.cpp.in)

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kReproduced = 0, kNotReproduced = 1, kCannotReplay = 2;

// The BLAS ops a replay can call: CPU BLAS GEMMs and GEMVs, whose recorded arguments and
// operands are the whole call. PyTorch ops: any whose arguments the adapter recorded
// (replay_torch.py says when one was not).
constexpr const char* kReplayableBlas[] = {"sgemm_", "dgemm_", "cblas_sgemm", "cblas_dgemm",
                                           "sgemv_", "dgemv_"};

struct CaseTensor {
  std::string name, role, dtype, file;
  std::vector<int64_t> shape, strides;
  // The tensor's layout as fumi describes it (no data).
  fumi_tensor layout() const {
    fumi_tensor t{};
    t.ndim = static_cast<int32_t>(std::min<size_t>(shape.size(), FUMI_MAX_DIMS));
    for (int32_t d = 0; d < t.ndim; ++d) {
      t.shape[d] = shape[static_cast<size_t>(d)];
      t.strides[d] = strides[static_cast<size_t>(d)];
    }
    return t;
  }
  // Elements from the first to the last one the shape and strides reach (the file's span).
  int64_t span() const { return tensorSpan(layout()); }
};

struct Case {
  std::string dir;
  json desc;
  std::string op, backend;
  std::vector<CaseTensor> tensors;
  int a = -1, b = -1, c_in = -1, c_out = -1;  // indices into tensors (GEMV: A, x, y)
  std::string arg(const char* key) const {
    const json& args = desc.at("args");
    if (!args.contains(key)) throw std::runtime_error(std::string("no argument '") + key + "'");
    return args.at(key).get<std::string>();
  }
};

// Reads DIR/call.json. Returns an error message, or an empty string.
std::string readCase(const std::string& dir, Case* c) {
  c->dir = dir;
  const std::string path = (fs::path(dir) / "call.json").string();
  std::ifstream in(path);
  if (!in)
    return "cannot read " + path +
           " (a case a `dump` rule wrote: <out>/cases/<pid>-<op>-<call index>/)";
  try {
    in >> c->desc;
    c->op = c->desc.at("op").get<std::string>();
    c->backend = c->desc.value("backend", std::string());
    for (const json& t : c->desc.at("tensors")) {
      CaseTensor ct;
      ct.name = t.at("name").get<std::string>();
      ct.role = t.at("role").get<std::string>();
      ct.dtype = t.at("dtype").get<std::string>();
      ct.file = t.at("file").get<std::string>();
      ct.shape = t.at("shape").get<std::vector<int64_t>>();
      ct.strides = t.at("strides").get<std::vector<int64_t>>();
      if (ct.shape.size() != ct.strides.size() || ct.shape.size() > FUMI_MAX_DIMS)
        throw std::runtime_error("shape and strides differ in length, or too many dimensions");
      c->tensors.push_back(ct);
    }
  } catch (const std::exception& e) {
    return path + ": " + e.what();
  }
  for (size_t i = 0; i < c->tensors.size(); ++i) {
    const CaseTensor& t = c->tensors[i];
    const int k = static_cast<int>(i);
    if (t.name == "A")
      c->a = k;
    else if (t.name == "B" || t.name == "x")
      c->b = k;
    else if (t.name == "C" || t.name == "y")
      (t.role == "input" ? c->c_in : c->c_out) = k;
  }
  return "";
}

bool blasCase(const Case& c) {
  return c.backend == "blas" && std::any_of(std::begin(kReplayableBlas),
                                            std::end(kReplayableBlas),
                                            [&](const char* op) { return c.op == op; });
}

bool replayable(const Case& c) { return blasCase(c) || c.backend == "torch"; }

// The file a replay child writes output `index` of the case to.
std::string replayedFile(const std::string& dir, size_t index) {
  return (fs::path(dir) / ("replayed-t" + std::to_string(index) + ".bin")).string();
}

// The raw bytes of `path`, an operand laid out as `t` with elements of `elem_bytes`: at least
// t's span of them, else an error.
std::vector<char> loadBytes(const std::string& path, const CaseTensor& t, size_t elem_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const int64_t need = t.span() * static_cast<int64_t>(elem_bytes);
  if (static_cast<int64_t>(bytes.size()) < need)
    throw std::runtime_error(path + ": " + std::to_string(bytes.size()) +
                             " bytes, the operand spans " + std::to_string(need));
  return bytes;
}

// The same as elements of T.
template <class T>
std::vector<T> loadOperand(const std::string& path, const CaseTensor& t) {
  const std::vector<char> bytes = loadBytes(path, t, sizeof(T));
  std::vector<T> v(bytes.size() / sizeof(T));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
  return v;
}

// Operand `index` of the case, from its file in the case's directory.
template <class T>
std::vector<T> loadOperand(const Case& c, int index) {
  const CaseTensor& t = c.tensors[static_cast<size_t>(index)];
  return loadOperand<T>((fs::path(c.dir) / t.file).string(), t);
}

// The BLAS the program used is not known: the system's, or FUMI_REPLAY_BLAS. Loaded global, so
// that the op's name resolves to libfumi's hook first and the hook forwards to this library.
void* entryPoint(const std::string& op) {
  std::vector<std::string> libs = {"libblas.so.3", "libopenblas.so.0", "libblas.so"};
  if (const std::string lib = readSettings().replay_blas; !lib.empty()) libs = {lib};
  for (const std::string& lib : libs)
    if (dlopen(lib.c_str(), RTLD_NOW | RTLD_GLOBAL)) break;
  return dlsym(RTLD_DEFAULT, op.c_str());
}

template <class T>
void callGemm(const Case& c, void* fn, std::vector<T>& a, std::vector<T>& b, std::vector<T>& out) {
  const CaseTensor &ta = c.tensors[static_cast<size_t>(c.a)],
                   &tb = c.tensors[static_cast<size_t>(c.b)];
  const int m = static_cast<int>(ta.shape.at(0)), k = static_cast<int>(ta.shape.at(1)),
            n = static_cast<int>(tb.shape.at(1));
  const int lda = std::stoi(c.arg("lda")), ldb = std::stoi(c.arg("ldb")),
            ldc = std::stoi(c.arg("ldc"));
  const T alpha = static_cast<T>(std::stod(c.arg("alpha"))),
          beta = static_cast<T>(std::stod(c.arg("beta")));
  const char tra = c.arg("transa").at(0), trb = c.arg("transb").at(0);
  // The leading dimensions are the operands' recorded strides (so BLAS reads within the files).
  const auto leading = [&](int index, int ld) {
    const CaseTensor& t = c.tensors[static_cast<size_t>(index)];
    if (std::max(t.strides[0], t.strides[1]) != ld || std::min(t.strides[0], t.strides[1]) != 1)
      throw std::runtime_error(t.name + "'s strides do not match its leading dimension");
  };
  leading(c.a, lda);
  leading(c.b, ldb);
  leading(c.c_out, ldc);
  if (tb.shape.at(0) != k || c.tensors[static_cast<size_t>(c.c_out)].shape.at(0) != m ||
      c.tensors[static_cast<size_t>(c.c_out)].shape.at(1) != n)
    throw std::runtime_error("the operands' shapes do not make a product");
  if (c.op.rfind("cblas_", 0) == 0) {
    using Fn = void (*)(int, int, int, int, int, int, T, const T*, int, const T*, int, T, T*, int);
    const auto trans = [](char t) { return t == 'N' ? 111 : t == 'T' ? 112 : 113; };
    const int layout = c.arg("layout") == "row" ? 101 : 102;
    reinterpret_cast<Fn>(fn)(layout, trans(tra), trans(trb), m, n, k, alpha, a.data(), lda,
                             b.data(), ldb, beta, out.data(), ldc);
  } else {
    using Fn =
        void (*)(const char*, const char*, const int*, const int*, const int*, const T*, const T*,
                 const int*, const T*, const int*, const T*, T*, const int*, size_t, size_t);
    reinterpret_cast<Fn>(fn)(&tra, &trb, &m, &n, &k, &alpha, a.data(), &lda, b.data(), &ldb, &beta,
                             out.data(), &ldc, 1, 1);
  }
}

// y = alpha op(A) x + beta y, A stored m x n with leading dimension lda (op(A) recorded as
// rows x cols), x and y with their recorded increments.
template <class T>
void callGemv(const Case& c, void* fn, std::vector<T>& a, std::vector<T>& x, std::vector<T>& y) {
  const CaseTensor& ta = c.tensors[static_cast<size_t>(c.a)];
  const char tr = c.arg("trans").at(0);
  const bool trans = tr != 'N' && tr != 'n';
  const int rows = static_cast<int>(ta.shape.at(0)), cols = static_cast<int>(ta.shape.at(1));
  const int m = trans ? cols : rows, n = trans ? rows : cols;
  const int lda = std::stoi(c.arg("lda")), incx = std::stoi(c.arg("incx")),
            incy = std::stoi(c.arg("incy"));
  if (std::max(ta.strides[0], ta.strides[1]) != lda || std::min(ta.strides[0], ta.strides[1]) != 1)
    throw std::runtime_error("A's strides do not match its leading dimension");
  const CaseTensor &tx = c.tensors[static_cast<size_t>(c.b)],
                   &ty = c.tensors[static_cast<size_t>(c.c_out)];
  if (tx.shape.at(0) != cols || ty.shape.at(0) != rows || tx.strides.at(0) != incx ||
      ty.strides.at(0) != incy)
    throw std::runtime_error("x and y do not match A's shape and their increments");
  const T alpha = static_cast<T>(std::stod(c.arg("alpha"))),
          beta = static_cast<T>(std::stod(c.arg("beta")));
  using Fn = void (*)(const char*, const int*, const int*, const T*, const T*, const int*,
                      const T*, const int*, const T*, T*, const int*, size_t);
  reinterpret_cast<Fn>(fn)(&tr, &m, &n, &alpha, a.data(), &lda, x.data(), &incx, &beta,
                           y.data(), &incy, 1);
}

// The child: the call made again with the recorded operands, its output written into `dir`
// (the recorded output's layout).
template <class T>
void replayBlas(const Case& c, const std::string& dir) {
  const bool gemv = c.op.find("gemv") != std::string::npos;
  if (c.a < 0 || c.b < 0 || c.c_out < 0)
    throw std::runtime_error(gemv ? "the case lacks A, x or y" : "the case lacks A, B or C");
  for (const CaseTensor& t : c.tensors)
    if (t.shape.size() != (gemv && t.name != "A" ? 1u : 2u))
      throw std::runtime_error(t.name + (gemv && t.name != "A" ? " is not a vector"
                                                               : " is not a matrix"));
  std::vector<T> a = loadOperand<T>(c, c.a);
  std::vector<T> b = loadOperand<T>(c, c.b);
  const CaseTensor& tc = c.tensors[static_cast<size_t>(c.c_out)];
  // C as the call found it: the snapshot taken before it (beta != 0), else zeros.
  std::vector<T> out = c.c_in >= 0 ? loadOperand<T>(c, c.c_in)
                                   : std::vector<T>(static_cast<size_t>(tc.span()), T(0));
  void* fn = entryPoint(c.op);
  if (!fn) throw std::runtime_error("no BLAS library provides " + c.op + " (set FUMI_REPLAY_BLAS)");
  if (gemv)
    callGemv<T>(c, fn, a, b, out);
  else
    callGemm<T>(c, fn, a, b, out);
  const std::string out_file = replayedFile(dir, static_cast<size_t>(c.c_out));
  std::ofstream o(out_file, std::ios::binary);
  o.write(reinterpret_cast<const char*>(out.data()),
          static_cast<std::streamsize>(out.size() * sizeof(T)));
  if (!o) throw std::runtime_error("cannot write " + out_file);
}

// How the replayed outputs (the files the child wrote into `dir`) compare with the recorded
// ones, element by element over their shapes: bit for bit, and the largest relative difference.
std::string compareOutputs(const Case& c, const std::string& dir, bool* identical) {
  int64_t differ = 0, total = 0;
  double worst = 0;
  for (size_t k = 0; k < c.tensors.size(); ++k) {
    const CaseTensor& t = c.tensors[k];
    if (t.role != "output") continue;
    const fumi_dtype dt = dtypeNamed(t.dtype.c_str());
    const size_t bytes = static_cast<size_t>(dtypeBytes(dt));
    if (bytes == 0) throw std::runtime_error("output " + t.name + " has dtype " + t.dtype);
    const std::vector<char> want = loadBytes((fs::path(c.dir) / t.file).string(), t, bytes),
                            got = loadBytes(replayedFile(dir, k), t, bytes);
    forEachElement(t.layout(), [&](int64_t, int64_t at) {
      ++total;
      const size_t byte = static_cast<size_t>(at) * bytes;
      if (std::memcmp(&want[byte], &got[byte], bytes) == 0) return;
      ++differ;
      const double w = loadAsDouble(want.data(), at, dt), g = loadAsDouble(got.data(), at, dt);
      worst = std::max(worst, std::fabs(w - g) / std::max(std::fabs(g), 1e-300));
    });
  }
  *identical = differ == 0;
  std::ostringstream s;
  if (differ == 0) {
    s << "bit-identical to the recorded one (" << total << " elements)";
  } else {
    s << "differs from the recorded one in " << differ << " of " << total
      << " elements (largest relative difference " << worst
      << "): the recorded call did not compute what this machine computes from the same "
         "operands now (a fault in that run, or another library, thread count or CPU)";
  }
  return s.str();
}

// The replay's figure for the recorded check and metric (the worst value of the op's summary)
// and whether the replay violated it.
bool replayedFigure(const std::string& out, const Case& c, double* value, bool* violated) {
  const std::string key =
      c.desc.value("check", std::string()) + "." + c.desc.value("metric", std::string());
  for (const report::OpStats& op : report::readDirectory(out).ops) {
    if (op.op != c.op) continue;
    const auto worst = op.worst.find(key);
    if (worst == op.worst.end()) continue;
    *value = worst->second;
    const auto metric =
        op.metrics.find(key);  // this metric's violations, where the summary has them
    *violated = metric != op.metrics.end() ? metric->second.violations > 0 : op.violations > 0;
    return true;
  }
  return false;
}

// A policy that checks the case's op with the check that flagged it, as it was judged: its
// metric, its tolerance and its parameters, in a rule of the recorded rule's name (a check's
// random draws are seeded by its rule's and plugin's names, and the call index). A
// cancellation (docs/policy.md, "Cancellation in the data") was the check's own figure judged
// against the policy's cancellation bound, the event's tolerance, its error tolerance kept as
// the extra `error_tolerance`: both go back where they came from.
std::string replayPolicy(const Case& c) {
  const std::string check = c.desc.value("check", std::string());
  const auto quoted = [](const std::string& text) { return json(text).dump(); };  // YAML too
  const auto numberAt = [](const json& object, const char* key) -> std::optional<double> {
    if (!object.is_object() || !object.contains(key) || !object.at(key).is_number()) return {};
    return object.at(key).get<double>();
  };
  const bool cancellation = c.desc.value("kind", std::string()) == "cancellation";
  std::optional<double> tolerance = numberAt(c.desc, "tolerance");
  std::ostringstream p;
  p.precision(17);
  p << "version: 1\noverhead_budget: 1\n";
  if (cancellation && tolerance) {
    p << "tolerances: { cancellation: " << *tolerance << " }\n";
    tolerance = numberAt(c.desc.value("extra", json::object()), "error_tolerance");
  }
  p << "rules:\n  - name: " << quoted(c.desc.value("rule", std::string("replay")))
    << "\n    match: { op: " << quoted(c.op)
    << " }\n    sample: { every: 1 }\n    checks:\n      - { plugin: " << check;
  // A cancellation's own metric, where the rule named one, is among the check's parameters.
  const json params = c.desc.value("check_params", json::object());
  const std::string metric = cancellation ? params.value("metric", std::string())
                                          : c.desc.value("metric", std::string());
  if ((check == "highprec" || check == "reference") && !metric.empty())
    p << ", metric: " << metric;
  if (check == "perturb") p << ", metric: " << (metric == "fumi_ratio" ? "ratio" : metric);
  if (tolerance) p << ", tolerance: " << *tolerance;
  if (c.desc.contains("check_params") && c.desc.at("check_params").is_object())
    for (const auto& [key, value] : c.desc.at("check_params").items())
      if (key != "metric" && value.is_string())
        p << ", " << key << ": " << quoted(value.get<std::string>());
  p << " }\n";
  return p.str();
}

// The Python that replays a PyTorch case: FUMI_REPLAY_PYTHON, else the program's own
// interpreter (the case's executable, where it is a Python and still there), else python3.
std::string replayPython(const Case& c) {
  if (const std::string py = readSettings().replay_python; !py.empty()) return py;
  const std::string exe = c.desc.value("executable", std::string());
  std::error_code ec;
  if (fs::path(exe).filename().string().rfind("python", 0) == 0 && fs::exists(exe, ec))
    return exe;
  return "python3";
}

}  // namespace

int replayCallCommand(const std::string& case_dir, const std::string& out_dir) {
  Case c;
  if (const std::string err = readCase(case_dir, &c); !err.empty()) {
    std::cerr << "fumi replay-call: " << err << "\n";
    return kCannotReplay;
  }
  try {
    if (c.op == "sgemm_" || c.op == "cblas_sgemm" || c.op == "sgemv_")
      replayBlas<float>(c, out_dir);
    else if (c.op == "dgemm_" || c.op == "cblas_dgemm" || c.op == "dgemv_")
      replayBlas<double>(c, out_dir);
    else
      throw std::runtime_error(c.op + " cannot be replayed");
  } catch (const std::exception& e) {
    std::cerr << "fumi replay-call: " << case_dir << ": " << e.what() << "\n";
    return kCannotReplay;
  }
  return 0;
}

int replayCommand(const ReplayOptions& options) {
  Case c;
  if (const std::string err = readCase(options.case_dir, &c); !err.empty()) {
    std::cerr << "fumi replay: " << err << "\n";
    return kCannotReplay;
  }
  if (!replayable(c)) {
    std::cerr << "fumi replay: " << c.op << " (" << c.backend
              << ") cases cannot be replayed yet: only PyTorch ops and CPU BLAS GEMMs and GEMVs "
                 "(sgemm_, dgemm_, cblas_sgemm, cblas_dgemm, sgemv_, dgemv_)\n";
    return kCannotReplay;
  }
  if (!c.desc.contains("check") || !c.desc.contains("metric")) {
    std::cerr << "fumi replay: " << options.case_dir << "/call.json names no check and metric\n";
    return kCannotReplay;
  }
  const std::string out = absolutePath(
      options.out.empty() ? (fs::path(options.case_dir) / "replay").string() : options.out);
  std::error_code ec;
  fs::create_directories(out, ec);
  RunOptions run;
  run.out = out;
  run.policy = options.policy;
  if (run.policy.empty()) {
    run.policy = (fs::path(out) / "replay-policy.yaml").string();
    std::ofstream(run.policy) << replayPolicy(c);
  }
  for (size_t k = 0; k < c.tensors.size(); ++k) fs::remove(replayedFile(out, k), ec);
  if (blasCase(c)) {
    const std::string fumi = exePath();
    run.command = {fumi.empty() ? "fumi" : fumi, "replay-call", absolutePath(options.case_dir),
                   out};
  } else {
    const std::string script = (fs::path(out) / "replay.py").string();
    std::ofstream(script) << replayTorchScript();
    run.command = {replayPython(c), script, absolutePath(options.case_dir), out};
  }
  // The call keeps its index (random checks draw from it): the replay numbers each op's calls
  // from the recorded one.
  setenv("FUMI_FIRST_CALL_INDEX", std::to_string(c.desc.value("call_index", uint64_t{0})).c_str(),
         1);
  const int rc = runCommand(run);
  if (rc != 0) {
    std::cerr << "fumi replay: the replay did not complete (exit status " << rc << ")\n";
    return kCannotReplay;
  }

  bool identical = false;
  std::string output;
  try {
    output = compareOutputs(c, out, &identical);
  } catch (const std::exception& e) {
    std::cerr << "fumi replay: " << e.what() << "\n";
    return kCannotReplay;
  }
  const std::string key =
      c.desc.value("check", std::string()) + "." + c.desc.value("metric", std::string());
  const bool recorded_violation = c.desc.value("event", std::string()) == "violation";
  double value = 0;
  bool violated = false;
  const bool judged = replayedFigure(out, c, &value, &violated);
  std::cout << "fumi replay: " << c.op << " #" << c.desc.value("call_index", 0) << " from "
            << options.case_dir << "\n";
  std::cout << "  recorded: " << key << " = " << c.desc.value("value", 0.0);
  if (c.desc.contains("tolerance")) std::cout << " (tolerance " << c.desc.at("tolerance") << ")";
  std::cout << (recorded_violation ? ": violation" : "") << "\n";
  std::cout << "  replayed: ";
  if (judged)
    std::cout << key << " = " << value << (violated ? ": violation" : ": within tolerance");
  else
    std::cout << key << " not judged (see " << out << ")";
  const bool reproduced = judged && violated == recorded_violation;
  std::cout << (reproduced ? " — reproduced" : " — not reproduced") << "\n";
  std::cout << "  output:   " << output << "\n";
  std::cout << "  replay's events and output: " << out << "\n";
  return reproduced ? kReproduced : kNotReproduced;
}

}  // namespace fumi::cli
