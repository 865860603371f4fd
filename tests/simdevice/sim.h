// sim.h — what the simulated device's stand-in libraries share (header-only; each stand-in is
// its own shared object, as the real libraries are, so nothing here has state).
//
// The simulated device runs CUDA semantics on host memory, for tests on machines without a
// GPU. To keep "passes on the simulator" meaning "would pass on hardware":
//  - device pointers are NOT host-dereferenceable: cudaMalloc returns the host address with
//    kDeviceTag set, a non-canonical x86-64 address, so a host read of device memory faults
//    exactly where it would be a bug on a GPU;
//  - stream work is asynchronous: every stream has a worker thread executing its queue in
//    order, so results are visible to the host only after a synchronisation;
//  - stream capture follows the runtime's rules (unsafe calls fail and invalidate captures).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace sim {

constexpr uintptr_t kDeviceTag = uintptr_t{1} << 62;

inline bool isDevicePointer(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & kDeviceTag) != 0;
}
// The host address behind a device pointer (host pointers pass through unchanged). Only a
// stand-in's "kernels" (stream work) may use it.
inline void* hostAddress(const void* p) {
  return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) & ~kDeviceTag);
}
inline void* deviceAddress(void* host) {
  return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(host) | kDeviceTag);
}

}  // namespace sim
