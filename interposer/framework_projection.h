// framework_projection.h — the `checksum` check's projections (reference.h) for framework ops of
// the GEMM and convolution families, from the adapter's description of a call: its tensors
// (named as the op's schema names them) and its non-tensor arguments as text. libfumi reads
// them itself, so an adapter needs no projection code (adapter.cpp, AdapterCall::project).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "adapter_api.h"
#include "contract.h"
#include "elementwise.h"
#include "fumi/plugin.h"
#include "reference.h"

namespace fumi {

class Call;

// Output `output` of the call of `op` ("aten::addmm"; an overload suffix is ignored) projected
// as fumi_host_api.project says. Modelled: aten::mm, bmm, mv, addmm, baddbmm, addmv (self
// broadcast as C) and aten::convolution (_convolution) / convolution_backward (not transposed;
// grad_input and grad_weight). FUMI_UNSUPPORTED for anything else.
// The work a device op's projection does on its device (Call: contractDevice, convolveDevice,
// scanDevice of the call's tensor `index`), and host copies of the call's tensors (made when
// first asked for; null when they cannot be) for what the device does not do.
struct DeviceOps {
  DeviceContract contract;
  std::function<fumi_status(const fumi_device_conv&)> convolve;
  std::function<fumi_status(int32_t index, fumi_scan* out)> scan;
  std::function<const std::vector<fumi_tensor>*()> on_host;
};

// With `device`, the op is projected where its operands live, and nothing is copied: the GEMM
// family by contractions (matmulProjection's `device`), convolutions by contracting the filter
// (or dy, for grad_weight) with the vectors on the device and one convolution with `count`
// channels there (the host's convProjection, rearranged for groups; the same noise floor).
// Where that cannot be done (compensated sums, the device declining) the same projection runs
// on device->on_host()'s copies; an op or output that is not projected at all (grad_bias,
// transposed, grad_weight with groups) is FUMI_UNSUPPORTED before anything is copied.
fumi_status frameworkProjection(const char* op, const std::vector<fumi_tensor>& tensors,
                                const std::vector<std::pair<const char*, std::string>>& args,
                                int32_t output, const std::vector<Projection>& sides,
                                const DeviceOps* device = nullptr);
inline fumi_status frameworkProjection(
    const char* op, const std::vector<fumi_tensor>& tensors,
    const std::vector<std::pair<const char*, std::string>>& args, int32_t output,
    const Projection& p) {
  return frameworkProjection(op, tensors, args, output, std::vector<Projection>{p});
}

// convProjection (reference.h) of a convolution whose operands are in device memory, done where
// they live with `device` (the same steps as a device op's, above: cuDNN's alpha, beta * prior,
// alpha2 * z, bias and true convolution included); where the device declines, on
// device.on_host()'s copies. FUMI_UNSUPPORTED for what convProjection does not project either.
fumi_status convProjectionOnDevice(const std::vector<fumi_tensor>& tensors, const ConvSpec& spec,
                                   int32_t output, const std::vector<Projection>& sides,
                                   const DeviceOps& device);

// The device work of `call`'s own contractDevice, convolveDevice and scanDevice (no on_host).
DeviceOps deviceOpsOf(Call& call);

// How the terms map (fumi_host_api.map with FUMI_MAP_ABS, from which the noise rule and the
// cancellation figures take the magnitudes of the terms an output sums: op(|x|)) treats tensor
// `index` of a call of `op`. |x| makes every term of a sum of products positive (GEMM,
// convolution and their backwards). A normalisation's backward sums products of dy and
// x^ = (x - mean) * invstd, which |x| does not (|x| - |mean| changes sign and is smaller: its
// op(|x|) understated the terms); there the input is reflected about its mean,
// mean + |x - mean| (kCentred), and the mean is kept (kKeep), so that the rerun's grad_weight is
// sum |dy * x^| and grad_bias sum |dy|. Softmax's backward, y * (g - sum g * y), subtracts
// what |x| leaves positive: its output y is mapped to -|y| (kNegAbs), which makes it
// -|y| * (|g| + sum |g| * |y|), the terms' magnitudes up to the sign. kAbs (|x|) for every
// tensor of every other op, and of calls in device memory (a device op's terms stay the |x|
// rerun's, which understates them, as before), with broadcast strides, or a mean missing or of
// the wrong size.
struct TermsMap {
  enum Role { kAbs, kKeep, kCentred, kNegAbs } role = kAbs;
  int32_t mean = -1;  // kCentred: the mean tensor, and how it broadcasts over the input
  Centring centring;
};
TermsMap frameworkTermsMap(const char* op, const std::vector<fumi_tensor>& tensors,
                           const std::vector<std::pair<const char*, std::string>>& args,
                           int32_t index);

// Whether tensor `index` of framework op `op` holds indices stored as floating values in the
// first column of its last dimension: torchvision's region ops (roi_align, roi_pool,
// ps_roi_align, ps_roi_pool, forward and backward) take `rois` as K x 5 rows (image in the
// batch, x1, y1, x2, y2). A perturbation leaves that column as it is: image 1 moved by its last
// bit reads as image 0, and the whole region's result moves to another image (batch 17 F4: a
// healthy roi_align's perturb ratio read 1).
bool frameworkIndexColumn(const char* op, const std::vector<fumi_tensor>& tensors,
                          int32_t index);

// The number of terms each output of a call of `op` sums (fumi_call_info.reduction_length), from
// the same schema names: the GEMM family (k), convolution forward (C_in/groups * filter
// elements), convolution_backward (the larger of grad_input's C_out/groups * filter elements
// and grad_weight's N * output elements), the normalisations' backward (the larger of the
// elements sharing a mean and those sharing a weight), softmax's and log-softmax's backward
// (the softmax dimension), elementwise ops that round once (add/sub with
// alpha 1, mul, div, neg, abs, relu, ...: 1) and reductions (sum, mean, norm, logsumexp: the
// input elements per output element). 0 for every other op (not known) and for calls on
// complex tensors (argument "complex": their real views), whose projections are
// FUMI_UNSUPPORTED too.
int64_t frameworkReductionLength(const char* op, const std::vector<fumi_tensor>& tensors,
                                 const std::vector<std::pair<const char*, std::string>>& args);

}  // namespace fumi
