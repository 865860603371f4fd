// reference.h — fumi's independent host implementations, for the `reference` check: the output
// of a call recomputed in fp64 on the host from the call's own operands (any dtype, layout or
// memory), by code that shares nothing with the library that ran the call.
//
// How to give a Call a reference: describe its operands once as a MatmulSpec (or add a spec
// type for another operation family here) and return matmulReference(...) from the Call's
// reference() override.
#pragma once

#include <cstdint>
#include <vector>

#include "fumi/plugin.h"

namespace fumi {

// D = act(alpha * A * B + beta * C + bias) over tensor indices of a call. A is [batch x] m x k,
// B [batch x] k x n (or a length-k vector: n = 1), C and D like D ([batch x] m x n or a
// length-m vector), bias m x 1 shared by every batch. c and bias are -1 when absent.
struct MatmulSpec {
  enum class Act { kNone, kRelu, kGelu };  // gelu: the tanh form cuBLASLt's epilogue computes
  int a = -1, b = -1, c = -1, d = -1, bias = -1;
  double alpha = 1, beta = 0;
  Act act = Act::kNone;
};

// Output `output` of the call (it must be spec.d) as dense row-major fp64 in `out`. Sums are
// compensated (error-free products and sums), so the reference is accurate well past fp64
// rounding even for an fp64 call.
fumi_status matmulReference(const std::vector<fumi_tensor>& tensors, const MatmulSpec& spec,
                            int32_t output, double* out);

}  // namespace fumi
