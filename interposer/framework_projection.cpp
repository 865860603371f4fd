// framework_projection.cpp — frameworkProjection (framework_projection.h).
#include "framework_projection.h"

#include <cstdlib>
#include <cstring>

namespace fumi {

namespace {

using Args = std::vector<std::pair<const char*, std::string>>;

int find(const std::vector<fumi_tensor>& ts, const char* name) {
  for (size_t i = 0; i < ts.size(); ++i)
    if (ts[i].name && std::strcmp(ts[i].name, name) == 0) return static_cast<int>(i);
  return -1;
}

const std::string* arg(const Args& args, const char* name) {
  for (const auto& [key, value] : args)
    if (key && std::strcmp(key, name) == 0) return &value;
  return nullptr;
}

// The numbers in an argument's text ("2.", "[1, 1]", "True"); none when it is absent.
std::vector<double> numbers(const Args& args, const char* name) {
  const std::string* text = arg(args, name);
  if (!text) return {};
  if (*text == "True" || *text == "False") return {*text == "True" ? 1.0 : 0.0};
  std::vector<double> out;
  const char* s = text->c_str();
  while (*s) {
    char* end = nullptr;
    const double v = std::strtod(s, &end);
    if (end != s) {
      out.push_back(v);
      s = end;
    } else {
      ++s;
    }
  }
  return out;
}

// The first number of an argument's text, `fallback` when it is absent or holds none.
double number(const Args& args, const char* name, double fallback) {
  const std::vector<double> v = numbers(args, name);
  return v.empty() ? fallback : v[0];
}

// `t` seen with `ndim` dimensions of `shape` under broadcasting (dimensions aligned at the end;
// missing or size-1 ones repeat with stride 0). False when the shapes do not broadcast.
bool broadcastTo(const fumi_tensor& t, const int64_t* shape, int ndim, fumi_tensor* out) {
  if (t.ndim > ndim) return false;
  *out = t;
  out->ndim = ndim;
  const int lead = ndim - t.ndim;
  for (int d = ndim - 1; d >= 0; --d) {
    const int from = d - lead;
    const int64_t size = from >= 0 ? t.shape[from] : 1;
    if (size != shape[d] && size != 1) return false;
    out->shape[d] = shape[d];
    out->strides[d] = size == 1 ? 0 : t.strides[from];
  }
  return true;
}

fumi_status gemm(const std::vector<fumi_tensor>& given, const Args& args, const char* a,
                 const char* b, const char* self, int32_t output,
                 const std::vector<Projection>& p) {
  std::vector<fumi_tensor> ts = given;
  MatmulSpec s;
  s.a = find(ts, a);
  s.b = find(ts, b);
  s.d = find(ts, "out");
  if (s.a < 0 || s.b < 0 || s.d != output) return FUMI_UNSUPPORTED;
  if (self) {  // beta * self + alpha * a b, self broadcast like the output
    s.alpha = number(args, "alpha", 1.0);
    s.beta = number(args, "beta", 1.0);
    const int c = find(ts, self);
    if (c < 0 && s.beta != 0) return FUMI_UNSUPPORTED;
    if (s.beta != 0) {
      const fumi_tensor d = ts[static_cast<size_t>(s.d)];
      fumi_tensor view;
      if (!broadcastTo(ts[static_cast<size_t>(c)], d.shape, d.ndim, &view))
        return FUMI_UNSUPPORTED;
      view.role = FUMI_ROLE_INPUT;
      ts.push_back(view);
      s.c = static_cast<int>(ts.size()) - 1;
    }
  }
  return matmulProjection(ts, s, output, p);
}

fumi_status convolution(const std::vector<fumi_tensor>& ts, const Args& args, bool backward,
                        int32_t output, const std::vector<Projection>& p) {
  if (number(args, "transposed", 0.0) != 0) return FUMI_UNSUPPORTED;
  ConvSpec s;
  s.flip = false;  // frameworks' convolution is a cross-correlation
  const int input = find(ts, "input"), weight = find(ts, "weight");
  if (input < 0 || weight < 0) return FUMI_UNSUPPORTED;
  s.spatial = ts[static_cast<size_t>(input)].ndim - 2;
  if (s.spatial < 1 || s.spatial > 3) return FUMI_UNSUPPORTED;
  s.groups = static_cast<int>(number(args, "groups", 1.0));
  const std::pair<const char*, int*> lists[3] = {{"stride", s.stride}, {"padding", s.pad},
                                                 {"dilation", s.dilation}};
  for (const auto& [name, dst] : lists) {
    const std::vector<double> v = numbers(args, name);
    if (v.empty()) return FUMI_UNSUPPORTED;
    for (int d = 0; d < s.spatial; ++d) dst[d] = static_cast<int>(v[v.size() == 1 ? 0 : d]);
    if (v.size() != 1 && static_cast<int>(v.size()) != s.spatial) return FUMI_UNSUPPORTED;
  }
  if (!backward) {
    s.direction = ConvSpec::Direction::kForward;
    s.x = input;
    s.w = weight;
    s.y = find(ts, "out");
    s.bias = find(ts, "bias");
    return convProjection(ts, s, output, p);
  }
  s.y = find(ts, "grad_output");
  if (output == find(ts, "out0")) {  // grad_input
    s.direction = ConvSpec::Direction::kBackwardData;
    s.x = output;
    s.w = weight;
  } else if (output == find(ts, "out1")) {  // grad_weight
    s.direction = ConvSpec::Direction::kBackwardFilter;
    s.x = input;
    s.w = output;
  } else {
    return FUMI_UNSUPPORTED;  // grad_bias: a sum, not a convolution
  }
  return convProjection(ts, s, output, p);
}

}  // namespace

fumi_status frameworkProjection(const char* op, const std::vector<fumi_tensor>& ts,
                                const Args& args, int32_t output,
                                const std::vector<Projection>& p) {
  if (!op) return FUMI_UNSUPPORTED;
  const char* dot = std::strchr(op, '.');
  const std::string name = dot ? std::string(op, dot) : std::string(op);
  if (name == "aten::mm" || name == "aten::bmm") return gemm(ts, args, "self", "mat2", nullptr, output, p);
  if (name == "aten::mv") return gemm(ts, args, "self", "vec", nullptr, output, p);
  if (name == "aten::addmm") return gemm(ts, args, "mat1", "mat2", "self", output, p);
  if (name == "aten::baddbmm") return gemm(ts, args, "batch1", "batch2", "self", output, p);
  if (name == "aten::addmv") return gemm(ts, args, "mat", "vec", "self", output, p);
  if (name == "aten::convolution") return convolution(ts, args, false, output, p);
  if (name == "aten::convolution_backward") return convolution(ts, args, true, output, p);
  return FUMI_UNSUPPORTED;
}

}  // namespace fumi
