// sim_torch_device.cpp — a simulated torch device on the PrivateUse1 dispatch key
// ("privateuseone:0"), so fumi's PyTorch adapter can be tested on device ops without a GPU.
// Test-only, never installed. Load it into a process that has imported torch:
//   torch.ops.load_library(path)   (or ctypes.CDLL(path)); loading registers everything.
// Written against torch 1.13 (Debian's): the registration API exists from 1.10 on, but the
// SymInt schemas and the native view kernels reused here are 1.13's.
//
// Emulated (faithfully enough that what passes here would pass on a GPU):
//  - memory: one device, privateuseone:0, with its own allocator (c10::SetAllocator). Device
//    pointers are NOT host-dereferenceable: data_ptr() is the host address with kDeviceTag set,
//    a non-canonical x86-64 address (as tests/simdevice/sim.h does for CUDA), so a host read of
//    device memory faults where it would be a bug on a GPU. Fresh allocations are filled with
//    0xFF bytes (NaN in every floating dtype): code that reads memory it never wrote shows NaNs
//    instead of the zeros a fresh host page happens to hold.
//  - a DeviceGuardImplInterface: one device (index 0), one stream (the default stream), every
//    kernel synchronous, so stream queries answer "done" and synchronisation is a no-op.
//  - kernels (the PrivateUse1 kernels torch 1.13 has no composite for, and functional variants
//    so that each op is one dispatcher call, as with a real backend):
//      factories   empty.memory_format, empty_strided
//      copies      _copy_from (CPU->device, device->CPU, device->device, dtype conversion and
//                  broadcasting as copy_ does), _copy_from_and_resize
//      views       as_strided, view, _reshape_alias (t, transpose, expand, ... are torch's
//                  composites over these; clone, empty_like, _to_copy, ... likewise)
//      GEMM        mm, mm.out, addmm, addmm.out, addmm_ (the "device GEMM": planted behaviours)
//      convolution convolution_overrideable, convolution_backward_overrideable (the backend
//                  hook aten::convolution and convolution_backward call for a device without
//                  kernels of its own), run as the CPU's aten::convolution / _backward
//      host        kHostOps below: the op's CPU kernel run on host views of device memory
//                  (fill/zero/resize_, item(), +-*/ and neg, sum/mean, relu, mse_loss and the
//                  backward kernels of a small MLP, what print(tensor) needs, cat, what
//                  fumi's device checks need: where, xor, right shift, clamp_min, norm, and
//                  bmm, baddbmm, mv, addmv)
//    A "host" kernel runs the CPU kernel on CPU tensors that alias the device memory (same
//    storage, offset, sizes, strides; one host storage per device storage, so the CPU kernel's
//    overlap checks see aliasing). Out= and in-place results land in device memory directly; a
//    CPU kernel that resizes an output grows the device storage (resize_ and out= semantics are
//    the CPU kernel's own); fresh results are copied to new device memory. Like a GPU kernel,
//    a kernel rejects CPU tensors among its arguments, except 0-dim ones where TensorIterator
//    takes them as scalars (never in GEMMs).
//  - planted behaviours of the device GEMM, read once from the environment at load:
//      FUMI_SIMTORCH_TF32=1   fp32 mm/addmm round both matrix operands (not the added C) to
//                             TF32 (10-bit mantissa, round to nearest even) and multiply with
//                             fp32 accumulation: cuBLAS with TF32 tensor cores on Ampere and
//                             later, i.e. a job that set torch.backends.cuda.matmul.allow_tf32
//                             (False by default since torch 1.12; True in 1.7 to 1.11). The flag
//                             itself is not consulted. Other dtypes are unaffected.
//      FUMI_SIMTORCH_FAULTS=wrong:MxNxK[,wrong:MxNxK...]
//                             an mm/addmm whose output has M rows and N columns, with inner size
//                             K, returns every output element times (1 + 1e-2), in every floating
//                             dtype, so rerunning the op on the device (even in fp64) is wrong
//                             too; only an independent CPU computation catches it.
//    A malformed value makes every GEMM fail with a c10::Error naming it.
//
//  - a meter: torch.ops.fumi_sim.bytes_to_host() returns the bytes copied from device memory
//    to the host since load (_copy_from's device->CPU copies, counted at the source), so tests
//    can bound what a tool moves off the device (fumi's checks of device ops move scalars).
//
// Not emulated: more than one device, streams other than the default one, events (record,
// block and query fail as the interface's defaults do), asynchrony (non_blocking copies are
// synchronous), pinned memory, caching-allocator behaviour (memory is freed at once), device
// properties, every op not listed (it fails with torch's "Could not run 'aten::...' with
// arguments from the 'PrivateUse1' backend", as it would on a backend lacking the kernel),
// non-strided layouts, and device-side numerics other than the planted ones: every kernel
// computes exactly what the CPU kernel computes. Host kernels are CPU kernels: their BLAS calls
// (sgemm_, dgemm_) reach fumi's BLAS hooks, where a real device's GEMMs would be cuBLAS calls,
// and the aten ops they call internally show up as nested CPU ops, as in a CPU run.
//
// Robustness: nothing here is extern "C"; the allocator's deleter and the guard's noexcept
// methods cannot throw; registration at load catches everything (the loader is C); kernels
// throw c10::Error as torch kernels do. The library is linked
// with -z nodelete: torch keeps pointers to its allocator and guard implementation.
//
// How to add a kernel: an op whose CPU kernel is right for the device goes into kHostOps (give
// its functional, in-place and out= overloads, each is its own dispatcher entry); anything else
// gets a function and an m.impl line in the TORCH_LIBRARY_IMPL block at the end.

#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/convolution_backward_ops.h>
#include <ATen/ops/convolution_ops.h>
#include <ATen/ops/copy_ops.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/view_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/TensorOptions.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace {

constexpr c10::DeviceType kDeviceType = c10::DeviceType::PrivateUse1;
const c10::Device kDevice(kDeviceType, 0);
const c10::Device kHost(c10::DeviceType::CPU);
const c10::DispatchKeySet kDeviceKeys(c10::DispatchKey::PrivateUse1);
const c10::DispatchKeySet kHostKeys(c10::DispatchKey::CPU);

// ---- configuration (the planted behaviours), read once --------------------------------------

struct GemmShape {
  int64_t m, n, k;  // output rows, output columns, inner size
};

struct Config {
  bool tf32 = false;
  std::vector<GemmShape> wrong;
  std::string error;  // a malformed variable: every GEMM fails with this
};

bool parsePositive(const std::string& text, int64_t* value) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return false;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (*end != '\0' || v <= 0) return false;
  *value = v;
  return true;
}

// "wrong:MxNxK"
bool parseFault(const std::string& entry, GemmShape* shape) {
  static const std::string kWrong = "wrong:";
  if (entry.compare(0, kWrong.size(), kWrong) != 0) return false;
  const std::string dims = entry.substr(kWrong.size());
  const size_t x1 = dims.find('x');
  const size_t x2 = x1 == std::string::npos ? x1 : dims.find('x', x1 + 1);
  if (x2 == std::string::npos) return false;
  return parsePositive(dims.substr(0, x1), &shape->m) &&
         parsePositive(dims.substr(x1 + 1, x2 - x1 - 1), &shape->n) &&
         parsePositive(dims.substr(x2 + 1), &shape->k);
}

Config readConfig() {
  Config c;
  const char* tf32 = std::getenv("FUMI_SIMTORCH_TF32");
  const std::string tf32_text = tf32 ? tf32 : "";
  if (tf32_text == "1") {
    c.tf32 = true;
  } else if (!tf32_text.empty() && tf32_text != "0") {
    c.error = "FUMI_SIMTORCH_TF32='" + tf32_text + "': expected 0 or 1";
  }
  const char* faults = std::getenv("FUMI_SIMTORCH_FAULTS");
  std::string rest = faults ? faults : "";
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string entry = rest.substr(0, comma);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    GemmShape shape{};
    if (parseFault(entry, &shape)) {
      c.wrong.push_back(shape);
    } else if (c.error.empty()) {
      c.error = "FUMI_SIMTORCH_FAULTS entry '" + entry + "': expected wrong:MxNxK";
    }
  }
  return c;
}

const Config& config() {
  static const Config c = [] {
    try {
      Config read = readConfig();
      if (!read.error.empty()) std::fprintf(stderr, "fumi_simtorch: %s\n", read.error.c_str());
      return read;
    } catch (const std::exception& e) {  // bad_alloc: fail the GEMMs rather than the load
      Config failed;
      failed.error = e.what();
      return failed;
    }
  }();
  return c;
}

// ---- device memory ---------------------------------------------------------------------------

constexpr uintptr_t kDeviceTag = uintptr_t{1} << 62;
constexpr size_t kAlignment = 256;  // what cudaMalloc guarantees
constexpr unsigned char kFreshByte = 0xFF;

// Tagging is integer arithmetic on addresses by design.
void* deviceAddress(void* host) {
  return reinterpret_cast<void*>(  // NOLINT(performance-no-int-to-ptr)
      reinterpret_cast<uintptr_t>(host) | kDeviceTag);
}
// The host address behind a device address. Only this file's kernels may use it.
void* hostAddress(const void* device) {
  return reinterpret_cast<void*>(  // NOLINT(performance-no-int-to-ptr)
      reinterpret_cast<uintptr_t>(device) & ~kDeviceTag);
}

// Blocks are malloc'd host memory; a DataPtr's context is always the untagged block.
void freeBlock(void* block) { std::free(block); }

void* allocateBlock(size_t n) {
  const size_t rounded = (n + kAlignment - 1) / kAlignment * kAlignment;
  void* block = std::aligned_alloc(kAlignment, rounded);
  TORCH_CHECK_WITH(OutOfMemoryError, block != nullptr, "privateuseone: out of memory allocating ",
                   n, " bytes");
  std::memset(block, kFreshByte, rounded);
  return block;
}

class DeviceAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) const override {
    if (n == 0) return c10::DataPtr(nullptr, nullptr, &freeBlock, kDevice);
    void* block = allocateBlock(n);
    return c10::DataPtr(deviceAddress(block), block, &freeBlock, kDevice);
  }
  // data != context: the raw interface is not available.
};

// The allocator of the host views' storages: a CPU kernel that grows an output's storage
// allocates here, and HostScope::commit hands the block to the device storage.
class HostSideAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) const override {
    if (n == 0) return c10::DataPtr(nullptr, nullptr, &freeBlock, kHost);
    void* block = allocateBlock(n);
    return c10::DataPtr(block, block, &freeBlock, kHost);
  }
  c10::DeleterFnPtr raw_deleter() const override { return &freeBlock; }
};

DeviceAllocator g_device_allocator;
HostSideAllocator g_host_side_allocator;

struct RegisterAllocator {
  RegisterAllocator() { c10::SetAllocator(kDeviceType, &g_device_allocator); }
} g_register_allocator;

// ---- device guard: one device, one stream ----------------------------------------------------

class SimGuardImpl final : public c10::impl::DeviceGuardImplInterface {
 public:
  c10::DeviceType type() const override { return kDeviceType; }
  c10::Device exchangeDevice(c10::Device d) const override {
    check(d);
    return kDevice;
  }
  c10::Device getDevice() const override { return kDevice; }
  void setDevice(c10::Device d) const override { check(d); }
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device) const noexcept override { return defaultStream(); }
  c10::Stream getDefaultStream(c10::Device) const override { return defaultStream(); }
  c10::Stream getStreamFromGlobalPool(c10::Device, bool) const override { return defaultStream(); }
  c10::Stream exchangeStream(c10::Stream) const noexcept override { return defaultStream(); }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  // Kernels run synchronously: every stream is always idle.
  bool queryStream(const c10::Stream&) const override { return true; }
  void synchronizeStream(const c10::Stream&) const override {}
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}

 private:
  static c10::Stream defaultStream() noexcept { return c10::Stream(c10::Stream::DEFAULT, kDevice); }
  static void check(c10::Device d) {
    TORCH_CHECK(d.type() == kDeviceType, "privateuseone guard given a ", d.type(), " device");
    TORCH_CHECK(d.index() == 0, "privateuseone: invalid device ordinal ",
                static_cast<int>(d.index()), " (the simulated device has one device)");
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, SimGuardImpl);

// ---- host views of device memory -------------------------------------------------------------

bool onDevice(const at::Tensor& t) { return t.defined() && t.device().type() == kDeviceType; }

// Copies on the host, without a dispatcher entry of its own (no RecordFunction).
void hostCopy(at::Tensor dst, const at::Tensor& src) {
  at::_ops::copy_::redispatch(kHostKeys, dst, src, /*non_blocking=*/false);
}

// One kernel call's host views of device tensors. Views of one device storage share one host
// storage, so the CPU kernel sees which arguments alias.
class HostScope {
 public:
  // A CPU tensor over the memory of device tensor `t`. `written`: the kernel may write it
  // (commit() then carries a resize back to `t`).
  at::Tensor alias(const at::Tensor& t, bool written) {
    TORCH_CHECK(t.layout() == c10::kStrided && t.has_storage(),
                "privateuseone: only strided tensors are supported");
    c10::TensorImpl* device = t.unsafeGetTensorImpl();
    at::Tensor a =
        at::detail::make_tensor<c10::TensorImpl>(hostStorage(t.storage()), kHostKeys, t.dtype());
    c10::TensorImpl* host = a.unsafeGetTensorImpl();
    host->set_sizes_and_strides(t.sizes(), t.strides());
    host->set_storage_offset(t.storage_offset());
    host->_set_conj(t.is_conj());
    host->_set_neg(t.is_neg());
    host->set_allow_tensor_metadata_change(device->allow_tensor_metadata_change());
    if (written) written_.emplace_back(t, a);
    return a;
  }

  // After the CPU kernel ran: storages it grew now belong to the device storages, and written
  // tensors take the sizes, strides and offsets it gave their views.
  void commit() {
    for (Entry& e : storages_) {
      c10::StorageImpl* host = e.host.unsafeGetStorageImpl();
      c10::StorageImpl* device = e.device.unsafeGetStorageImpl();
      if (host->data() != e.base) {
        // resize_bytes_cpu allocated it through g_host_side_allocator
        void* block = host->data();
        TORCH_INTERNAL_ASSERT(block == nullptr || host->data_ptr().get_deleter() == &freeBlock,
                              "a host kernel replaced a device storage's memory");
        c10::DataPtr owned = host->set_data_ptr(c10::DataPtr(block, kHost));
        owned.release_context();  // the device storage owns the block from here on
        device->set_data_ptr_noswap(
            c10::DataPtr(block ? deviceAddress(block) : nullptr, block, &freeBlock, kDevice));
        e.base = block;
      }
      if (host->nbytes() != device->nbytes()) device->set_nbytes(host->nbytes());
    }
    for (auto& [device_tensor, host_tensor] : written_) {
      TORCH_INTERNAL_ASSERT(host_tensor.storage().is_alias_of(hostStorage(device_tensor.storage())),
                            "a host kernel replaced a device tensor's storage");
      c10::TensorImpl* d = device_tensor.unsafeGetTensorImpl();
      if (d->sizes() != host_tensor.sizes() || d->strides() != host_tensor.strides())
        d->set_sizes_and_strides(host_tensor.sizes(), host_tensor.strides());
      if (d->storage_offset() != host_tensor.storage_offset())
        d->set_storage_offset(host_tensor.storage_offset());
    }
  }

  // A CPU kernel's result as a device tensor: the written argument it returns, a view of
  // device memory, or a copy of a fresh host tensor in new device memory.
  at::Tensor result(const at::Tensor& r) {
    if (!r.defined()) return r;
    for (const auto& [device_tensor, host_tensor] : written_)
      if (r.is_same(host_tensor)) return device_tensor;
    if (r.has_storage()) {
      for (const Entry& e : storages_) {
        if (!r.storage().is_alias_of(e.host)) continue;
        at::Tensor v = at::detail::make_tensor<c10::TensorImpl>(
            c10::TensorImpl::VIEW, c10::Storage(e.device), kDeviceKeys, r.dtype());
        v.unsafeGetTensorImpl()->set_sizes_and_strides(r.sizes(), r.strides());
        v.unsafeGetTensorImpl()->set_storage_offset(r.storage_offset());
        return v;
      }
    }
    TORCH_INTERNAL_ASSERT(r.is_cpu(), "a host kernel returned a ", r.device(), " tensor");
    at::Tensor d =
        r.is_non_overlapping_and_dense()
            ? at::Tensor(at::detail::empty_strided_generic(
                  r.sizes(), r.strides(), &g_device_allocator, kDeviceKeys, r.scalar_type()))
            : at::Tensor(at::detail::empty_generic(r.sizes(), &g_device_allocator, kDeviceKeys,
                                                   r.scalar_type(), c10::MemoryFormat::Contiguous));
    hostCopy(alias(d, /*written=*/false), r);
    return d;
  }

 private:
  struct Entry {
    c10::Storage device;
    c10::Storage host;
    void* base;  // the host address the host storage started with
  };

  c10::Storage hostStorage(const c10::Storage& device) {
    for (const Entry& e : storages_)
      if (e.device.is_alias_of(device)) return e.host;
    void* base = hostAddress(device.data());
    c10::Storage host(c10::Storage::use_byte_size_t(), device.nbytes(), c10::DataPtr(base, kHost),
                      &g_host_side_allocator, device.resizable());
    storages_.push_back(Entry{device, host, base});
    return host;
  }

  std::vector<Entry> storages_;
  std::vector<std::pair<at::Tensor, at::Tensor>> written_;  // device tensor, its host view
};

// Applies f to every tensor in v (Tensor, Tensor?, Tensor[], Tensor?[]).
template <class F>
c10::IValue mapTensors(const c10::IValue& v, F&& f) {
  if (v.isTensor()) return f(v.toTensor());
  if (v.isTensorList()) {
    const c10::List<at::Tensor> in = v.toTensorList();
    c10::List<at::Tensor> out;
    out.reserve(in.size());
    for (size_t i = 0; i < in.size(); ++i) out.push_back(f(in.get(i)));
    return out;
  }
  if (v.isList()) {
    const c10::List<c10::IValue> in = v.toList();
    bool tensors = false;
    for (size_t i = 0; i < in.size() && !tensors; ++i) tensors = in.get(i).isTensor();
    if (!tensors) return v;
    c10::impl::GenericList out(in.elementType());
    out.reserve(in.size());
    for (size_t i = 0; i < in.size(); ++i) out.push_back(mapTensors(in.get(i), f));
    return out;
  }
  return v;
}

enum class CpuArguments { kScalars, kNone };

// Runs op's CPU kernel on host views of the stack's device tensors and leaves device results
// on the stack. `before(stack, first_argument)` may replace host arguments; `after(stack,
// first_return)` sees the host results before they become device tensors.
template <class Before, class After>
void runOnHost(const c10::OperatorHandle& op, torch::jit::Stack* stack, CpuArguments cpu,
               Before&& before, After&& after) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t nargs = schema.arguments().size();
  TORCH_INTERNAL_ASSERT(stack->size() >= nargs);
  const size_t first = stack->size() - nargs;
  HostScope scope;
  for (size_t i = 0; i < nargs; ++i) {
    const c10::AliasInfo* info = schema.arguments()[i].alias_info();
    const bool written = info != nullptr && info->isWrite();
    c10::IValue& v = (*stack)[first + i];
    v = mapTensors(v, [&](const at::Tensor& t) -> at::Tensor {
      if (!t.defined()) return t;
      if (onDevice(t)) return scope.alias(t, written);
      // What a GPU kernel accepts: TensorIterator takes 0-dim CPU tensors as scalars.
      TORCH_CHECK(t.is_cpu() && cpu == CpuArguments::kScalars && t.dim() == 0 && !written,
                  "Expected all tensors to be on the same device, but found at least two "
                  "devices, privateuseone:0 and ",
                  t.device(), "! (", schema.name(), ", argument ", schema.arguments()[i].name(),
                  ")");
      return t;
    });
  }
  before(*stack, first);
  op.redispatchBoxed(kHostKeys, stack);
  const size_t nrets = schema.returns().size();
  TORCH_INTERNAL_ASSERT(stack->size() >= nrets);
  const size_t rfirst = stack->size() - nrets;
  after(*stack, rfirst);
  scope.commit();
  for (size_t i = rfirst; i < stack->size(); ++i)
    (*stack)[i] = mapTensors((*stack)[i], [&](const at::Tensor& r) { return scope.result(r); });
}

void hostKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto as_is = [](torch::jit::Stack&, size_t) {};
  runOnHost(op, stack, CpuArguments::kScalars, as_is, as_is);
}

// Ops whose CPU kernel is the device kernel (one dispatcher entry per overload).
// clang-format off
const char* const kHostOps[] = {
    // storage and filling
    "resize_", "fill_.Scalar", "fill_.Tensor", "zero_",
    // reading a value back (Tensor.item())
    "_local_scalar_dense",
    // element-wise arithmetic
    "add.Tensor", "add_.Tensor", "add.out", "sub.Tensor", "sub_.Tensor", "sub.out", "mul.Tensor",
    "mul_.Tensor", "mul.out", "div.Tensor", "div_.Tensor", "div.out", "neg", "neg_", "neg.out",
    // reductions
    "sum.dim_IntList", "sum.IntList_out", "mean.dim", "mean.out",
    // activations, losses and their backward (a small training loop)
    "relu", "relu_", "threshold_backward", "threshold_backward.grad_input", "mse_loss",
    "mse_loss.out", "mse_loss_backward", "mse_loss_backward.grad_input",
    // what print(tensor) needs
    "abs", "abs_", "abs.out", "isnan", "ceil", "ceil.out", "eq.Scalar", "eq.Scalar_out",
    "eq.Tensor", "eq.Tensor_out", "ne.Scalar", "ne.Scalar_out", "ne.Tensor", "ne.Tensor_out",
    "bitwise_and.Tensor", "bitwise_and.Tensor_out", "gt.Scalar", "gt.Scalar_out", "lt.Scalar",
    "lt.Scalar_out", "masked_select", "min", "max", "cat", "cat.out",
    // what fumi's element-wise primitives run on a device (interposer/torch: counter-based
    // noise in 64-bit integer words, masked fp64 reductions)
    "where.self", "bitwise_xor.Tensor", "__rshift__.Scalar", "clamp_min", "norm.out",
    // the rest of the GEMM family (the CPU kernels; no planted behaviour)
    "bmm", "bmm.out", "baddbmm", "baddbmm.out", "mv", "mv.out", "addmv", "addmv.out",
};
// clang-format on

// ---- the device GEMM (mm, addmm): CPU kernel plus the planted behaviours ---------------------

// fp32 -> TF32 (10 explicit mantissa bits), round to nearest even; Inf/NaN kept.
uint32_t roundToTf32(uint32_t bits) {
  if ((bits & 0x7f800000u) == 0x7f800000u) return bits;
  const uint32_t lsb = (bits >> 13) & 1u;
  return (bits + 0x0fffu + lsb) & ~uint32_t{0x1fff};
}

// A host copy of fp32 host tensor t (same layout when dense) holding its values rounded to TF32.
at::Tensor tf32Copy(const at::Tensor& t) {
  at::Tensor r =
      t.is_non_overlapping_and_dense()
          ? at::Tensor(at::detail::empty_strided_cpu(t.sizes(), t.strides(), at::ScalarType::Float))
          : at::Tensor(at::detail::empty_cpu(t.sizes(), at::ScalarType::Float,
                                             /*pin_memory=*/false, c10::MemoryFormat::Contiguous));
  hostCopy(r, t);
  // Dense: every element of the storage span [data, data + numel) is one of r's elements.
  auto* data = static_cast<uint32_t*>(r.data_ptr());
  for (int64_t i = 0; i < r.numel(); ++i) data[i] = roundToTf32(data[i]);
  return r;
}

bool faulty(const GemmShape& s) {
  for (const GemmShape& w : config().wrong)
    if (w.m == s.m && w.n == s.n && w.k == s.k) return true;
  return false;
}

void gemmKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const Config& c = config();
  TORCH_CHECK(c.error.empty(), "fumi_simtorch: ", c.error);
  // The two matrix operands: mm(self, mat2), addmm(self, mat1, mat2).
  const bool addmm = op.schema().name() == "aten::addmm" || op.schema().name() == "aten::addmm_";
  const size_t a_index = addmm ? 1 : 0;
  bool wrong = false;
  runOnHost(
      op, stack, CpuArguments::kNone,
      [&](torch::jit::Stack& s, size_t first) {
        c10::IValue& a = s[first + a_index];
        c10::IValue& b = s[first + a_index + 1];
        if (!a.isTensor() || !b.isTensor()) return;
        const at::Tensor& ta = a.toTensor();
        const at::Tensor& tb = b.toTensor();
        if (ta.dim() == 2 && tb.dim() == 2)
          wrong = faulty(GemmShape{ta.size(0), tb.size(1), ta.size(1)});
        if (c.tf32 && ta.scalar_type() == at::ScalarType::Float &&
            tb.scalar_type() == at::ScalarType::Float) {
          a = tf32Copy(ta);
          b = tf32Copy(tb);
        }
      },
      [&](torch::jit::Stack& s, size_t first) {
        if (!wrong) return;
        at::Tensor out = s[first].toTensor();
        if (at::isFloatingType(out.scalar_type()) || at::isComplexType(out.scalar_type()))
          at::_ops::mul__Scalar::redispatch(kHostKeys, out, at::Scalar(1.0 + 1e-2));
      });
}

const char* const kGemmOps[] = {"mm", "mm.out", "addmm", "addmm.out", "addmm_"};

// ---- factories and copies --------------------------------------------------------------------

void checkFactory(c10::optional<at::Layout> layout, c10::optional<at::Device> device,
                  c10::optional<bool> pin_memory) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::kStrided,
              "privateuseone: only strided tensors are supported");
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "Only dense CPU tensors can be pinned");
  if (device) {
    TORCH_CHECK(device->type() == kDeviceType, "privateuseone factory given a ", device->type(),
                " device");
    TORCH_CHECK(!device->has_index() || device->index() == 0,
                "privateuseone: invalid device ordinal ", static_cast<int>(device->index()),
                " (the simulated device has one device)");
  }
}

at::Tensor emptyMemoryFormat(at::IntArrayRef size, c10::optional<at::ScalarType> dtype,
                             c10::optional<at::Layout> layout, c10::optional<at::Device> device,
                             c10::optional<bool> pin_memory,
                             c10::optional<at::MemoryFormat> memory_format) {
  checkFactory(layout, device, pin_memory);
  return at::Tensor(at::detail::empty_generic(size, &g_device_allocator, kDeviceKeys,
                                              c10::dtype_or_default(dtype), memory_format));
}

at::Tensor emptyStrided(at::IntArrayRef size, at::IntArrayRef stride,
                        c10::optional<at::ScalarType> dtype, c10::optional<at::Layout> layout,
                        c10::optional<at::Device> device, c10::optional<bool> pin_memory) {
  checkFactory(layout, device, pin_memory);
  return at::Tensor(at::detail::empty_strided_generic(size, stride, &g_device_allocator,
                                                      kDeviceKeys, c10::dtype_or_default(dtype)));
}

// Bytes read from device memory by copies to the host (the source's bytes), since load:
// fumi_sim::bytes_to_host().
std::atomic<int64_t> g_bytes_to_host{0};

int64_t bytesToHost() { return g_bytes_to_host.load(std::memory_order_relaxed); }

// copy_ redispatches here whenever either side is on this device (copy_impl: devices other than
// CPU/CUDA/... go through _copy_from). The CPU copy_ on host views does the work: dtype
// conversion, broadcasting, strides, overlap checks.
at::Tensor copyFrom(const at::Tensor& self, const at::Tensor& dst, bool /*non_blocking*/) {
  for (const at::Tensor* t : {&self, &dst})
    TORCH_CHECK(t->is_cpu() || onDevice(*t), "privateuseone: cannot copy between ", self.device(),
                " and ", dst.device());
  if (onDevice(self) && dst.is_cpu())
    g_bytes_to_host.fetch_add(static_cast<int64_t>(self.nbytes()), std::memory_order_relaxed);
  HostScope scope;
  const at::Tensor src_host = onDevice(self) ? scope.alias(self, /*written=*/false) : self;
  const at::Tensor dst_host = onDevice(dst) ? scope.alias(dst, /*written=*/true) : dst;
  hostCopy(dst_host, src_host);
  scope.commit();
  return dst;
}

at::Tensor copyFromAndResize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  return copyFrom(self, dst, /*non_blocking=*/false);
}

// ---- convolutions: the CPU's, through the backend hook aten offers other devices ----------

// aten::convolution and convolution_backward reach a device without kernels of its own through
// these two (their "Overrideable" backend); the CPU kernels do the work on host views, reached
// by redispatch (no dispatcher entry of their own: a CPU run's op counts).
at::Tensor convolutionOverrideable(const at::Tensor& input, const at::Tensor& weight,
                                   const c10::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                   at::IntArrayRef padding, at::IntArrayRef dilation,
                                   bool transposed, at::IntArrayRef output_padding,
                                   int64_t groups) {
  HostScope scope;
  c10::optional<at::Tensor> host_bias;
  if (bias && bias->defined()) host_bias = scope.alias(*bias, /*written=*/false);
  const at::Tensor r = at::_ops::convolution::redispatch(
      kHostKeys, scope.alias(input, false), scope.alias(weight, false), host_bias, stride, padding,
      dilation, transposed, output_padding, groups);
  scope.commit();
  return scope.result(r);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolutionBackwardOverrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
    at::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask) {
  HostScope scope;
  const int64_t channels = transposed ? weight.size(1) * groups : weight.size(0);
  const std::vector<c10::SymInt> bias_sizes{c10::SymInt(channels)};
  const auto [gi, gw, gb] = at::_ops::convolution_backward::redispatch(
      kHostKeys, scope.alias(grad_output, false), scope.alias(input, false),
      scope.alias(weight, false), c10::SymIntArrayRef(bias_sizes), stride, padding, dilation,
      transposed, output_padding, groups, output_mask);
  scope.commit();
  return {scope.result(gi), scope.result(gw), scope.result(gb)};
}

}  // namespace

// The simulator's own ops (not aten's): what tests read about the run.
TORCH_LIBRARY(fumi_sim, m) {
  try {
    m.def("bytes_to_host() -> int", &bytesToHost);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fumi_simtorch: registering fumi_sim ops failed: %s\n", e.what());
  }
}

// Runs while the dynamic loader initialises the library: nothing may be thrown into it. A
// registration that fails leaves its op without a kernel ("Could not run ...") after this line.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  try {
    (void)config();  // read the environment once, at load
    m.impl("empty.memory_format", TORCH_FN(emptyMemoryFormat));
    m.impl("empty_strided", TORCH_FN(emptyStrided));
    m.impl("_copy_from", TORCH_FN(copyFrom));
    m.impl("_copy_from_and_resize", TORCH_FN(copyFromAndResize));
    // torch's own view kernels: they touch only sizes, strides and the shared storage.
    m.impl("as_strided", TORCH_FN(at::native::as_strided_tensorimpl));
    m.impl("view", TORCH_FN(at::native::view));
    m.impl("_reshape_alias", TORCH_FN(at::native::_reshape_alias));
    m.impl("convolution_overrideable", TORCH_FN(convolutionOverrideable));
    m.impl("convolution_backward_overrideable", TORCH_FN(convolutionBackwardOverrideable));
    for (const char* name : kGemmOps)
      m.impl(name, torch::CppFunction::makeFromBoxedFunction<&gemmKernel>());
    for (const char* name : kHostOps)
      m.impl(name, torch::CppFunction::makeFromBoxedFunction<&hostKernel>());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fumi_simtorch: registering the device's kernels failed: %s\n", e.what());
  }
}
