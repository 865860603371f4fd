// framework_projection.h — the `checksum` check's projections (reference.h) for framework ops of
// the GEMM and convolution families, from the adapter's description of a call: its tensors
// (named as the op's schema names them) and its non-tensor arguments as text. libfumi reads
// them itself, so an adapter needs no projection code (adapter.cpp, AdapterCall::project).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fumi/plugin.h"
#include "reference.h"

namespace fumi {

// Output `output` of the call of `op` ("aten::addmm"; an overload suffix is ignored) projected
// as fumi_host_api.project says. Modelled: aten::mm, bmm, mv, addmm, baddbmm, addmv (self
// broadcast as C) and aten::convolution / convolution_backward (not transposed; grad_input and
// grad_weight). FUMI_UNSUPPORTED for anything else.
// With `device` (a device op's Call::contractDevice), the GEMM family is projected where its
// operands live (matmulProjection's `device`); FUMI_UNSUPPORTED where it cannot be, and for
// convolutions on a device (the caller copies the operands to the host then).
fumi_status frameworkProjection(const char* op, const std::vector<fumi_tensor>& tensors,
                                const std::vector<std::pair<const char*, std::string>>& args,
                                int32_t output, const std::vector<Projection>& sides,
                                const DeviceContract* device = nullptr);
inline fumi_status frameworkProjection(
    const char* op, const std::vector<fumi_tensor>& tensors,
    const std::vector<std::pair<const char*, std::string>>& args, int32_t output,
    const Projection& p) {
  return frameworkProjection(op, tensors, args, output, std::vector<Projection>{p});
}

// The number of terms each output of a call of `op` sums (fumi_call_info.reduction_length), from
// the same schema names: the GEMM family (k), convolution forward (C_in/groups * filter
// elements), convolution_backward (the larger of grad_input's C_out/groups * filter elements
// and grad_weight's N * output elements), elementwise ops that round once (add/sub with
// alpha 1, mul, div, neg, abs, relu, ...: 1) and reductions (sum, mean, norm, logsumexp: the
// input elements per output element). 0 for every other op (not known).
int64_t frameworkReductionLength(const char* op, const std::vector<fumi_tensor>& tensors,
                                 const std::vector<std::pair<const char*, std::string>>& args);

}  // namespace fumi
