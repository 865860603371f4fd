// call.h — the backend-neutral Call model. A hook decodes an intercepted call into a Call
// (operands as fumi_tensors, op identity, problem size) and implements rerun() for it; every
// check works through this interface only. Later backends (PyTorch, cuBLAS, cuDNN) subclass it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "adapter_api.h"
#include "fumi/plugin.h"
#include "reference.h"

namespace fumi {

struct OpSite;

// The shortest text that reads back as `v` (std::to_chars: "1", "0.5", "0.1", "inf"), for a
// call's scalar arguments (Call::addArg; `fumi replay` parses them back). snprintf's "%.17g"
// took longer than the rest of a checked call's bookkeeping.
std::string formatScalar(double v);

class Call {
 public:
  Call(OpSite& site, fumi_dtype dtype, fumi_dtype compute, int64_t size, uint64_t call_index);
  virtual ~Call() = default;
  Call(const Call&) = delete;
  Call& operator=(const Call&) = delete;

  // Append an operand; returns its index. shape/strides in elements (see fumi_tensor).
  int addTensor(const char* name, fumi_role role, fumi_dtype dtype, fumi_memory memory,
                std::initializer_list<int64_t> shape, std::initializer_list<int64_t> strides,
                void* data);
  // Append an operand described elsewhere (an adapter's fumi_tensor); returns its index.
  int addTensor(const fumi_tensor& t);

  // A scalar argument that is not an operand (transposes, alpha, beta, layout), for reports and
  // dumps, so a recorded call can be understood and rebuilt.
  void addArg(const char* name, std::string value) { args_.emplace_back(name, std::move(value)); }
  const std::vector<std::pair<const char*, std::string>>& args() const { return args_; }

  // Rerun the same operation computing in `precision`; buffers[i] replaces tensor i.
  virtual fumi_status rerun(fumi_dtype precision, void* const* buffers) = 0;
  // Output tensor `output` recomputed by fumi's own host fp64 implementation (reference.h), as
  // dense row-major fp64; FUMI_UNSUPPORTED for operations fumi has none for.
  virtual fumi_status reference(int32_t /*output*/, double* /*out*/) { return FUMI_UNSUPPORTED; }
  // Output tensor `output` as reference() computes it, projected onto vectors along one of its
  // dimensions without computing it (reference.h, Projection); FUMI_UNSUPPORTED where fumi has
  // no such projection.
  // Several sets of vectors in one call (fumi_host_api.project_sides; project is one set): the
  // operands read once for all of them where the operation allows.
  virtual fumi_status project(int32_t /*output*/, const std::vector<Projection>& /*sides*/) {
    return FUMI_UNSUPPORTED;
  }

  // The memory of this call's FUMI_MEMORY_DEVICE tensors, and the element-wise primitives
  // (plugin.h, ABI 2) on buffers laid out like its tensor `index` in that memory. The defaults
  // serve fumi's own hooks: memory of the CUDA runtime (setDeviceMemory), element-wise work
  // staged through host copies (engine.cpp). A framework's call supplies its own (AdapterCall:
  // the framework's device, the work done there). Sources are resolved (never null); host
  // tensors never come here.
  virtual void* allocDevice(size_t bytes);  // nullptr when none is left
  virtual void releaseDevice(void* p);
  virtual bool toHost(void* dst, const void* src, size_t bytes);
  virtual bool toDevice(void* dst, const void* src, size_t bytes);
  virtual fumi_status mapDevice(int32_t index, const void* src, fumi_dtype src_dtype, void* dst,
                                fumi_dtype dst_dtype, const fumi_map_spec& spec,
                                uint64_t* changed);
  virtual fumi_status compareDevice(int32_t index, const void* a, fumi_dtype a_dtype,
                                    const void* b, fumi_dtype b_dtype,
                                    const fumi_compare_spec& spec, fumi_comparison* out);
  virtual fumi_status scanDevice(int32_t index, const void* buffer, fumi_dtype dtype,
                                 fumi_scan* out);
  // A strided view of device memory contracted along `dim` with host vectors, the result on the
  // host (fumi_adapter_call.contract has the layouts): checksum's projections of a device op.
  // The default serves fumi's own hooks: the CUDA backend's kernels (cuda/device_launch.h).
  // FUMI_UNSUPPORTED (no kernels) makes the caller copy the tensors to the host instead.
  virtual fumi_status contractDevice(const fumi_tensor& view, int32_t dim, int32_t count,
                                     const double* vectors, double* out);
  // A convolution in fp64 on the device (adapter_api.h, fumi_device_conv): with
  // contractDevice, checksum's projection of a device op's convolution. The default serves
  // fumi's own hooks as contractDevice's does; FUMI_UNSUPPORTED as there.
  virtual fumi_status convolveDevice(const fumi_device_conv& conv);
  // For a dump: the call's tensors that tensors() leaves out (a framework op's integer
  // arguments), written into `dir`; their JSON description (adapter_api.h, write_aux), or "".
  virtual std::string writeAux(const std::string& /*dir*/) { return {}; }

  // The number of terms each output sums (fumi_call_info.reduction_length; 0: unknown).
  void setReductionLength(int64_t k) { info_.reduction_length = k; }
  // The training phase the call ran in (fumi_call_info.phase; the engine's, when it checks).
  void setPhase(const char* phase) { info_.phase = phase; }
  // Floating scalar arguments that are not finite (fumi_call_info.nonfinite_scalars).
  void setNonfiniteScalars(int32_t n) { info_.nonfinite_scalars = n; }

  // The scan (fumi_host_api.scan) of tensor `index`'s own data in its own dtype, kept for the
  // call's other checks: nan_inf after checksum (whose contraction of the output scans it in
  // the same pass) reads the output again otherwise. The call's memory does not change while
  // its checks run (results never change; reruns write fumi's buffers).
  bool keptScan(int32_t index, fumi_scan* out) const;
  void keepScan(int32_t index, const fumi_scan& scan);

  // The autocast dtype the framework ran the op under (FUMI_DTYPE_UNKNOWN: none), for reports.
  void setAutocast(fumi_dtype d) { autocast_ = d; }
  fumi_dtype autocast() const { return autocast_; }

  // Wall seconds the program's own call took (its backend timed it; 0: unknown, as for a
  // device op that returned before its work ran): what the overhead budget predicts a check's
  // cost from (CheckCosts).
  void setOpSeconds(double s) { op_seconds_ = s; }
  double opSeconds() const { return op_seconds_; }

  // Info handed to plugins; valid while the Call lives.
  const fumi_call_info& info();
  const std::vector<fumi_tensor>& tensors() const { return tensors_; }
  OpSite& site() const { return site_; }
  int64_t size() const { return size_; }

 private:
  OpSite& site_;
  fumi_call_info info_{};
  std::vector<fumi_tensor> tensors_;
  std::vector<std::pair<const char*, std::string>> args_;
  int64_t size_;
  fumi_dtype autocast_ = FUMI_DTYPE_UNKNOWN;
  double op_seconds_ = 0;
  std::vector<std::pair<bool, fumi_scan>> scans_;  // keepScan's, by tensor index
};

}  // namespace fumi
