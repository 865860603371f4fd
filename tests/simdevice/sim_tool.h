// sim_tool.h — the simulated device's profiling interface: what the driver offers CUPTI on a
// GPU, here offered by the cudart stand-in (in the driver's role) to the CUPTI stand-in (the
// tool), and the launch entry point through which the cuBLAS/cuBLASLt stand-ins' "kernels"
// become visible to it.
//
// Test-only symbols, named cuda* so cudart.map exports them; no real library has them. With
// no tool installed (the CUPTI stand-in not loaded), cudaFumiSimLaunchKernel is exactly
// cudaLaunchHostFunc, so nothing about the simulated device changes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

extern "C" {

// One kernel launch as the tool sees it, on the launching thread.
struct FumiSimLaunch {
  const char* kernel;        // the kernel's name; must live as long as the process
  const void* func;          // the host function standing for the kernel
  cudaStream_t stream;       // as the launch passed it
  uint32_t correlationId;    // assigned by the tool's launchEnter
  uint64_t correlationData;  // the tool's word for this launch, kept from enter to exit
  cudaError_t result;        // the launch's outcome, set before launchExit
};

struct FumiSimTool {
  // The API call's entry and exit (CUPTI's API callbacks), on the launching thread.
  void (*launchEnter)(FumiSimLaunch* launch);
  void (*launchExit)(FumiSimLaunch* launch);
  // A kernel activity record for a launch that is going to run (nullptr: the tool records
  // none). Called outside the runtime's locks: the tool may call its own client from here.
  void* (*kernelRecord)(const FumiSimLaunch* launch, unsigned long long streamId);
  // The recorded kernel ran from start to end (tool timestamps; on the stream's worker), or
  // never ran (ran == 0: the launch failed or was captured into a graph). Once per record.
  void (*kernelDone)(void* record, int ran, uint64_t start, uint64_t end);
  uint64_t (*timestamp)(void);
};

// Installs the tool (nullptr: none). The tool and everything it points to must stay valid
// for the rest of the process: stream work launched earlier still calls it.
void cudaFumiSimSetTool(const FumiSimTool* tool);

// Launches a stand-in library's "kernel": fn(userData) runs on `stream` in stream order, as
// with cudaLaunchHostFunc, and the installed tool sees it as the kernel `kernel`.
cudaError_t cudaFumiSimLaunchKernel(cudaStream_t stream, const char* kernel, cudaHostFn_t fn,
                                    void* userData);

// Appends a stand-in library's "kernel" to a graph made by cudaGraphCreate, as a kernel node
// after the graph's existing nodes (the simulator linearises graphs): fn(userData) runs on the
// launch stream each time an instantiation of the graph is launched (what cuDNN's
// cudnnBackendPopulateCudaGraph adds). Like every graph-launched kernel it gets no kernel
// record. The caller keeps userData alive as long as the graph or an instantiation may run.
// cudaErrorInvalidValue: not a live graph, or no fn; cudaErrorIllegalState: the graph is being
// captured into.
cudaError_t cudaFumiSimGraphAddKernelNode(cudaGraph_t graph, const char* kernel,
                                          cudaHostFn_t fn, void* userData);

}  // extern "C"
