// framework_projection.cpp — frameworkProjection (framework_projection.h).
#include "framework_projection.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "call.h"
#include "conv_dims.h"
#include "fumi/dtype.hpp"

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

// Whether the adapter described the call's complex tensors as real views (argument "complex"):
// the op's shapes then read one dimension more, and its arithmetic is not the real one (a
// complex product is four real ones and two sums), so nothing here applies.
bool complexViews(const Args& args) { return number(args, "complex", 0.0) != 0.0; }

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
                 const std::vector<Projection>& p, const DeviceContract* device) {
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
  return matmulProjection(ts, s, output, p, device);
}

// A view of rows [first, first + rows) of t along its dimension 0 (t's strides >= 0).
fumi_tensor rowsOf(const fumi_tensor& t, int64_t first, int64_t rows) {
  fumi_tensor v = t;
  v.shape[0] = rows;
  v.data = static_cast<char*>(t.data) + first * t.strides[0] * dtypeBytes(t.dtype);
  return v;
}

// The taps of each row of `rows` filters of `taps` taps reversed (a true convolution's filter
// as the cross-correlation reads it).
void mirrorTaps(double* data, int64_t rows, int64_t taps) {
  for (int64_t r = 0; r < rows; ++r) std::reverse(data + r * taps, data + (r + 1) * taps);
}

// `t` (all its elements) as a vector of `len` elements, where at most one of its dimensions is
// longer than 1: a bias of shape (1, K, 1, 1) or (K). False otherwise.
bool asVector(const fumi_tensor& t, int64_t len, fumi_tensor* out) {
  if (tensorNumel(t) != len) return false;
  *out = t;
  out->ndim = 1;
  out->shape[0] = len;
  out->strides[0] = 1;
  for (int d = 0; d < t.ndim; ++d)
    if (t.shape[d] != 1) out->strides[0] = t.strides[d];
  return true;
}

// convProjection for operands in device memory, on the device (convProjectionOnDevice): the
// vectors summed against the filter there (per group, into a dense filter with `count`
// channels) or against dy (backward filter), then one fp64 convolution with `count` channels
// there; the terms the convolution leaves out (beta * prior, alpha2 * z, bias) contracted
// there too. Only the sums and the projection come back.
fumi_status convolutionOnDevice(const std::vector<fumi_tensor>& ts, const ConvSpec& s,
                                int32_t output, const Projection& p, const DeviceOps& dev) {
  using Dir = ConvSpec::Direction;
  const bool forward = s.direction == Dir::kForward, filter = s.direction == Dir::kBackwardFilter;
  const int32_t channels_dim = filter ? 0 : 1;
  const fumi_tensor &x = ts[static_cast<size_t>(s.x)], &w = ts[static_cast<size_t>(s.w)],
                    &y = ts[static_cast<size_t>(s.y)];
  ConvDims d;
  if (!d.read(x, w, y, s)) return FUMI_UNSUPPORTED;
  if (hasNegativeStride(x) || hasNegativeStride(w) || hasNegativeStride(y))
    return FUMI_UNSUPPORTED;
  const fumi_tensor& out_t = ts[static_cast<size_t>(output)];
  const int32_t count = p.count;
  const int64_t len = out_t.shape[channels_dim], taps = d.spatialSize(d.filter),
                out_sp = d.spatialSize(d.out);
  const int64_t outer = filter ? 1 : d.n, inner = tensorNumel(out_t) / len / outer;
  fumi_device_conv c{};
  c.struct_size = sizeof c;
  c.spatial = s.spatial;
  for (int i = 0; i < 3; ++i) {
    c.stride[i] = s.stride[i];
    c.padding[i] = s.pad[i];
    c.dilation[i] = s.dilation[i];
  }
  c.out_ndim = out_t.ndim;
  std::copy(out_t.shape, out_t.shape + out_t.ndim, c.out_shape);
  c.out_shape[channels_dim] = count;
  c.out = p.out;
  // The operand summed against the vectors, as the convolution takes it from the host.
  std::vector<int64_t> shape(w.shape, w.shape + w.ndim);
  std::vector<double> host, v, got;
  if (s.direction == Dir::kBackwardFilter) {  // dy R: (N, count, out...)
    c.direction = FUMI_CONV_BACKWARD_FILTER;
    c.device = x;
    shape.assign(y.shape, y.shape + y.ndim);
    shape[1] = count;
    host.resize(static_cast<size_t>(d.n * count * out_sp));
    if (const fumi_status st = dev.contract(y, 1, count, p.vectors, host.data()); st != FUMI_OK)
      return st;
  } else {
    // Per group g, its filters' rows summed against the vectors' entries for its channels:
    // forward W~ (count, C, f) over the group's output channels, backward data W~ (K, count, f)
    // over its input channels.
    c.direction = forward ? FUMI_CONV_FORWARD : FUMI_CONV_BACKWARD_DATA;
    c.device = forward ? x : y;
    const int64_t per = forward ? d.kg : d.cg;  // vector entries per group
    if (forward) shape[0] = count, shape[1] = d.c;
    else shape[1] = count;
    host.assign(static_cast<size_t>(count * (forward ? d.c : d.k) * taps), 0.0);
    v.resize(static_cast<size_t>(count * per));
    got.resize(static_cast<size_t>(count * (forward ? d.cg : d.kg) * taps));
    for (int64_t g = 0; g < s.groups; ++g) {
      for (int32_t q = 0; q < count; ++q)
        std::copy_n(p.vectors + q * len + g * per, per, v.data() + q * per);
      if (const fumi_status st = dev.contract(rowsOf(w, g * d.kg, d.kg), forward ? 0 : 1, count,
                                              v.data(), got.data());
          st != FUMI_OK)
        return st;
      if (forward) {  // got (count, cg * taps) -> W~[q, g * cg + cl, f]
        for (int32_t q = 0; q < count; ++q)
          std::copy_n(got.data() + q * d.cg * taps, d.cg * taps,
                      host.data() + (q * d.c + g * d.cg) * taps);
      } else {  // got (kg, count, taps): W~'s rows of group g as they are
        std::copy(got.begin(), got.end(), host.data() + g * d.kg * count * taps);
      }
    }
    if (s.flip) mirrorTaps(host.data(), static_cast<int64_t>(host.size()) / taps, taps);
  }
  c.host = hostTensor("vectors", shape, host.data());
  if (const fumi_status st = dev.convolve(c); st != FUMI_OK) return st;
  if (filter && s.flip) mirrorTaps(p.out, count * d.c, taps);
  const int64_t projected = outer * count * inner;
  for (int64_t i = 0; i < projected; ++i) p.out[i] *= s.alpha;
  // beta * prior and alpha2 * z (cuDNN's forms), laid out like the output: contracted along its
  // channels as the output is projected.
  double others = 0;
  std::vector<double> term;
  for (const auto& [index, scale] : {std::pair{s.prior, s.beta}, std::pair{s.z, s.alpha2}}) {
    if (index < 0 || scale == 0) continue;
    const fumi_tensor& t = ts[static_cast<size_t>(index)];
    if (tensorNumel(t) != tensorNumel(out_t) || t.ndim != out_t.ndim) return FUMI_UNSUPPORTED;
    term.resize(static_cast<size_t>(projected));
    if (const fumi_status st = dev.contract(t, channels_dim, count, p.vectors, term.data());
        st != FUMI_OK)
      return st;
    for (int64_t i = 0; i < projected; ++i) p.out[i] += scale * term[static_cast<size_t>(i)];
    fumi_scan sc{};
    sc.struct_size = sizeof sc;
    if (const fumi_status st = dev.scan(index, &sc); st != FUMI_OK) return st;
    others += std::fabs(scale) * sc.max_abs;
  }
  if (forward && s.bias >= 0) {  // each vector summed against the bias, in its channel
    fumi_tensor bias;
    if (!asVector(ts[static_cast<size_t>(s.bias)], len, &bias)) return FUMI_UNSUPPORTED;
    std::vector<double> b(static_cast<size_t>(count));
    if (const fumi_status st = dev.contract(bias, 0, count, p.vectors, b.data()); st != FUMI_OK)
      return st;
    for (int64_t a = 0; a < outer; ++a)
      for (int32_t q = 0; q < count; ++q)
        for (int64_t i = 0; i < inner; ++i)
          p.out[(a * count + q) * inner + i] += b[static_cast<size_t>(q)];
    fumi_scan sb{};
    sb.struct_size = sizeof sb;
    if (const fumi_status st = dev.scan(s.bias, &sb); st != FUMI_OK) return st;
    others += sb.max_abs;
  }
  // The host's noise floor (convProjection): the reduced operand carries fp64 rounding of its
  // terms, bounded here by the operands' largest magnitudes; elements below it are 0.
  fumi_scan sa{}, sr{};
  sa.struct_size = sr.struct_size = sizeof(fumi_scan);
  for (const auto& [index, scan] : {std::pair{s.direction == Dir::kBackwardData ? s.y : s.x, &sa},
                                    std::pair{filter ? s.y : s.w, &sr}})
    if (const fumi_status st = dev.scan(index, scan); st != FUMI_OK) return st;
  const double terms = filter ? static_cast<double>(d.n * out_sp)
                              : static_cast<double>((forward ? d.cg : d.kg) * taps);
  zeroConvNoise(p, len, taps, outer, inner, [&](int32_t q) {
    double r_abs = 0;
    for (int64_t i = 0; i < len; ++i) r_abs += std::fabs(p.vectors[q * len + i]);
    return std::fabs(s.alpha) * sa.max_abs * r_abs * terms * sr.max_abs + others * r_abs;
  });
  return FUMI_OK;
}

}  // namespace

fumi_status convProjectionOnDevice(const std::vector<fumi_tensor>& ts, const ConvSpec& spec,
                                   int32_t output, const std::vector<Projection>& sides,
                                   const DeviceOps& device) {
  // What the host does not project either (the plugin asks for other dimensions too).
  const bool filter = spec.direction == ConvSpec::Direction::kBackwardFilter;
  const int expected = spec.direction == ConvSpec::Direction::kForward ? spec.y
                       : filter                                        ? spec.w
                                                                       : spec.x;
  if (spec.x < 0 || spec.w < 0 || spec.y < 0 || output != expected ||
      (filter && spec.groups != 1) || spec.act != ConvSpec::Act::kNone)
    return FUMI_UNSUPPORTED;
  for (const Projection& side : sides)
    if (side.dim != (filter ? 0 : 1) || side.out_lo || side.count < 1) return FUMI_UNSUPPORTED;
  fumi_status st = FUMI_OK;
  for (const Projection& side : sides)
    if (st = convolutionOnDevice(ts, spec, output, side, device); st != FUMI_OK) break;
  if (st != FUMI_UNSUPPORTED) return st;
  const std::vector<fumi_tensor>* host = device.on_host ? device.on_host() : nullptr;
  return host ? convProjection(*host, spec, output, sides) : FUMI_UNSUPPORTED;
}

DeviceOps deviceOpsOf(Call& call) {
  DeviceOps ops;
  ops.contract = [&call](const fumi_tensor& view, int32_t dim, int32_t count,
                         const double* vectors, double* out) {
    return call.contractDevice(view, dim, count, vectors, out);
  };
  ops.convolve = [&call](const fumi_device_conv& conv) { return call.convolveDevice(conv); };
  ops.scan = [&call](int32_t index, fumi_scan* out) {
    const fumi_tensor& t = call.tensors()[static_cast<size_t>(index)];
    return call.scanDevice(index, t.data, t.dtype, out);
  };
  return ops;
}

namespace {

fumi_status convolution(const std::vector<fumi_tensor>& ts, const Args& args, bool backward,
                        int32_t output, const std::vector<Projection>& p,
                        const DeviceOps* device) {
  if (number(args, "transposed", 0.0) != 0) return FUMI_UNSUPPORTED;
  // On the device where it can be, else on host copies.
  const auto project = [&](const ConvSpec& spec) {
    return device ? convProjectionOnDevice(ts, spec, output, p, *device)
                  : convProjection(ts, spec, output, p);
  };
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
    return project(s);
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
  return project(s);
}

// The op's name without its overload, "aten::add" for "aten::add_.Tensor" when `inplace` is
// set (the trailing underscore of an in-place op dropped too).
std::string baseName(const char* op, bool inplace) {
  const char* dot = std::strchr(op, '.');
  std::string name = dot ? std::string(op, dot) : std::string(op);
  if (inplace && name.size() > 1 && name.back() == '_') name.pop_back();
  return name;
}

int64_t product(const fumi_tensor& t, int from, int to) {
  int64_t n = 1;
  for (int d = from; d < to && d < t.ndim; ++d) n *= t.shape[d];
  return n;
}

// Elementwise ops whose every output is one correctly rounded operation of exact inputs.
constexpr const char* kRoundedOnce[] = {
    "aten::mul", "aten::div", "aten::neg", "aten::abs", "aten::relu", "aten::threshold_backward",
    "aten::clamp", "aten::clamp_min", "aten::clamp_max", "aten::where", "aten::maximum",
    "aten::minimum", "aten::sqrt", "aten::copy", "aten::_to_copy", "aten::fill"};

// Reductions: each output sums (or, for a norm, sums the squares of) the input elements that
// fold into it.
constexpr const char* kReductions[] = {"aten::sum",  "aten::nansum", "aten::mean",
                                       "aten::norm", "aten::linalg_vector_norm",
                                       "aten::logsumexp"};

// A normalisation's backward: the elements each mean covers (grad_input's sums) and each
// weight gathers (grad_weight's), 0 when the call is not one; its input, the mean x^ was
// centred on and how that mean broadcasts (TermsMap), input -1 where it cannot be centred.
struct Normalisation {
  int64_t per_mean = 0, per_weight = 0;
  int input = -1, mean = -1;
  Centring centring;
};

Normalisation normalisation(const std::string& name, const std::vector<fumi_tensor>& ts,
                            const Args& args) {
  Normalisation m;
  const int in = find(ts, "input");
  if (in < 0) return m;
  const fumi_tensor& x = ts[static_cast<size_t>(in)];
  const int64_t n = product(x, 0, x.ndim);
  const auto numel = [&](int i) {
    return i < 0 ? -1 : product(ts[static_cast<size_t>(i)], 0, FUMI_MAX_DIMS);
  };
  Centring& c = m.centring;
  if (name == "aten::native_batch_norm_backward") {
    if (x.ndim < 2 || x.shape[1] <= 0) return m;
    // Training normalises by the batch's statistics (saved), evaluation by the running ones.
    m.mean = find(ts, number(args, "train", 0.0) != 0 ? "save_mean" : "running_mean");
    c.channels = x.shape[1];
    c.inner = product(x, 2, x.ndim);
    m.per_mean = m.per_weight = n / c.channels;
    if (numel(m.mean) != c.channels) return m;
  } else if (name == "aten::native_layer_norm_backward") {
    m.mean = find(ts, "mean");  // one per row: the dimensions before the normalised ones
    const int64_t rows = numel(m.mean);
    if (rows <= 0 || n % rows != 0) return m;
    c.inner = m.per_mean = n / rows;
    c.outer = 1;
    m.per_weight = rows;
  } else if (name == "aten::native_group_norm_backward") {
    const auto count = [&](const char* key) { return static_cast<int64_t>(number(args, key, 0)); };
    const int64_t batch = count("N"), channels = count("C"), groups = count("group");
    if (batch <= 0 || channels <= 0 || groups <= 0 || channels % groups != 0 ||
        n % (batch * channels) != 0)
      return m;
    c = Centring{n / (batch * channels), channels, channels / groups, groups};
    m.per_mean = n / (batch * groups);
    m.per_weight = n / channels;
    m.mean = find(ts, "mean");  // N x groups
    if (numel(m.mean) != batch * groups) return m;
  } else {
    return m;
  }
  if (n == 0 || x.memory != FUMI_MEMORY_HOST) return m;
  for (int d = 0; d < x.ndim; ++d)  // a broadcast input: one element, several means
    if (x.shape[d] > 1 && x.strides[d] == 0) return m;
  m.input = in;
  return m;
}

}  // namespace

TermsMap frameworkTermsMap(const char* op, const std::vector<fumi_tensor>& ts, const Args& args,
                           int32_t index) {
  TermsMap map;
  if (!op || complexViews(args) || index < 0 || static_cast<size_t>(index) >= ts.size() ||
      ts[static_cast<size_t>(index)].memory != FUMI_MEMORY_HOST)
    return map;
  const std::string name = baseName(op, false);
  if (name == "aten::_softmax_backward_data") {
    if (index == find(ts, "output")) map.role = TermsMap::kNegAbs;
    return map;
  }
  const Normalisation m = normalisation(name, ts, args);
  if (m.input < 0) return map;
  if (index == m.input) {
    map.role = TermsMap::kCentred;
    map.mean = m.mean;
    map.centring = m.centring;
  } else if (index == m.mean) {
    map.role = TermsMap::kKeep;
  }
  return map;
}

bool frameworkIndexColumn(const char* op, const std::vector<fumi_tensor>& ts, int32_t index) {
  if (!op || index < 0 || static_cast<size_t>(index) >= ts.size()) return false;
  const fumi_tensor& t = ts[static_cast<size_t>(index)];
  // The tensor first: every perturbed input of every op asks.
  if (!t.name || std::strcmp(t.name, "rois") != 0 || t.ndim != 2 || t.shape[1] != 5) return false;
  const std::string name = baseName(op, false);
  return name.rfind("torchvision::", 0) == 0 && name.find("roi_") != std::string::npos;
}

int64_t frameworkReductionLength(const char* op, const std::vector<fumi_tensor>& ts,
                                 const Args& args) {
  if (!op || complexViews(args)) return 0;
  const std::string name = baseName(op, /*inplace=*/true);
  auto dim = [&](const char* tensor, int d) -> int64_t {  // d < 0 counts from the end
    const int i = find(ts, tensor);
    if (i < 0) return 0;
    const fumi_tensor& t = ts[static_cast<size_t>(i)];
    const int at = d < 0 ? t.ndim + d : d;
    return at >= 0 && at < t.ndim ? t.shape[at] : 0;
  };
  if (name == "aten::mm" || name == "aten::bmm" || name == "aten::mv" ||
      name == "aten::matmul")
    return dim("self", -1);
  if (name == "aten::linear") return dim("input", -1);
  if (name == "aten::addmm" || name == "aten::_addmm_activation") return dim("mat1", -1);
  if (name == "aten::addmv") return dim("mat", -1);
  if (name == "aten::baddbmm") return dim("batch1", -1);
  if (name == "aten::addbmm") return dim("batch1", 0) * dim("batch1", -1);
  if (name == "aten::dot" || name == "aten::vdot") return dim("self", 0);
  const bool forward_conv = name == "aten::convolution" || name == "aten::_convolution" ||
                            name == "aten::conv1d" || name == "aten::conv2d" ||
                            name == "aten::conv3d" || name == "aten::mkldnn_convolution";
  const int w = find(ts, "weight");
  if ((forward_conv || name == "aten::convolution_backward") && w >= 0) {
    if (number(args, "transposed", 0.0) != 0) return 0;
    const fumi_tensor& wt = ts[static_cast<size_t>(w)];
    const int64_t per_filter = product(wt, 1, wt.ndim);  // C_in/groups * filter spatial
    if (forward_conv) return per_filter;
    const int64_t groups = std::max<int64_t>(1, static_cast<int64_t>(number(args, "groups", 1.0)));
    const int64_t grad_input = wt.ndim > 0 ? wt.shape[0] / groups * product(wt, 2, wt.ndim) : 0;
    const int go = find(ts, "grad_output");  // N x C_out x output spatial
    const int64_t grad_weight =
        go < 0 ? 0 : dim("grad_output", 0) * product(ts[static_cast<size_t>(go)], 2, FUMI_MAX_DIMS);
    return std::max(grad_input, grad_weight);
  }
  if (name.size() > 13 && name.compare(name.size() - 13, 13, "norm_backward") == 0) {
    const Normalisation m = normalisation(name, ts, args);
    return std::max(m.per_mean, m.per_weight);
  }
  if (name == "aten::_softmax_backward_data" || name == "aten::_log_softmax_backward_data") {
    const int y = find(ts, "output");  // y (g * y summed along dim), or log y
    const int64_t d = static_cast<int64_t>(number(args, "dim", 0.0));
    if (y < 0) return 0;
    const fumi_tensor& t = ts[static_cast<size_t>(y)];
    const int64_t at = d < 0 ? d + t.ndim : d;
    return at >= 0 && at < t.ndim ? t.shape[at] : (t.ndim == 0 ? 1 : 0);
  }
  if (name == "aten::add" || name == "aten::sub")
    return number(args, "alpha", 1.0) == 1.0 ? 1 : 0;
  for (const char* e : kRoundedOnce)
    if (name == e) return 1;
  for (const char* e : kReductions)
    if (name == e) {
      const int in = find(ts, "self");
      int out = -1;
      for (size_t i = 0; i < ts.size() && out < 0; ++i)
        if (ts[i].role == FUMI_ROLE_OUTPUT) out = static_cast<int>(i);
      if (in < 0 || out < 0) return 0;
      const int64_t n_in = product(ts[static_cast<size_t>(in)], 0, FUMI_MAX_DIMS),
                    n_out = product(ts[static_cast<size_t>(out)], 0, FUMI_MAX_DIMS);
      return n_out > 0 && n_in >= n_out ? n_in / n_out : 0;
    }
  return 0;
}

fumi_status frameworkProjection(const char* op, const std::vector<fumi_tensor>& ts,
                                const Args& args, int32_t output,
                                const std::vector<Projection>& p, const DeviceOps* device) {
  if (!op || complexViews(args)) return FUMI_UNSUPPORTED;
  const char* dot = std::strchr(op, '.');
  const std::string name = dot ? std::string(op, dot) : std::string(op);
  // (a, b, self) of each op of the GEMM family
  static constexpr const char* kGemms[][4] = {
      {"aten::mm", "self", "mat2", nullptr},      {"aten::bmm", "self", "mat2", nullptr},
      {"aten::mv", "self", "vec", nullptr},       {"aten::addmm", "mat1", "mat2", "self"},
      {"aten::baddbmm", "batch1", "batch2", "self"}, {"aten::addmv", "mat", "vec", "self"}};
  for (const auto& g : kGemms)
    if (name == g[0]) {
      if (!device) return gemm(ts, args, g[1], g[2], g[3], output, p, nullptr);
      const fumi_status st = gemm(ts, args, g[1], g[2], g[3], output, p, &device->contract);
      if (st != FUMI_UNSUPPORTED) return st;
      const std::vector<fumi_tensor>* host = device->on_host ? device->on_host() : nullptr;
      return host ? gemm(*host, args, g[1], g[2], g[3], output, p, nullptr) : FUMI_UNSUPPORTED;
    }
  if (name == "aten::convolution" || name == "aten::_convolution")  // a traced graph's call
    return convolution(ts, args, false, output, p, device);
  if (name == "aten::convolution_backward") return convolution(ts, args, true, output, p, device);
  return FUMI_UNSUPPORTED;
}

}  // namespace fumi
