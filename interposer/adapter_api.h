/* adapter_api.h — the C interface between libfumi and its framework adapters (the PyTorch
 * adapter libfumi_torch.so, interposer/torch/). libfumi loads an adapter itself when the
 * framework appears in the process and calls its attach function with this table; adapters
 * never link against libfumi. Versioned like the plugin ABI: abi_version + struct_size,
 * fields only appended. */
#ifndef FUMI_ADAPTER_API_H
#define FUMI_ADAPTER_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FUMI_ADAPTER_ABI_VERSION 1u

typedef struct fumi_adapter_api {
  uint32_t abi_version;
  uint32_t struct_size;
  /* The op site for a framework op name ("aten::addmm"); created once, valid for the process
   * lifetime. NULL when fumi is not active. */
  void* (*intern_op)(const char* name, const char* backend);
  /* Count one call of `site` (from intern_op). */
  void (*count_call)(void* site);
  /* Framework-op context of the calling thread: library-level calls (BLAS, cuBLAS) made while
   * an op is pushed are reported "inside" it. Pops must match pushes. */
  void (*push_context)(void* site);
  void (*pop_context)(void);
} fumi_adapter_api;

/* Exported by an adapter: returns 0 on success, else writes why into err. */
typedef int (*fumi_adapter_attach_fn)(const fumi_adapter_api* api, char* err, size_t err_len);
#define FUMI_TORCH_ATTACH_SYMBOL "fumi_torch_attach"

#ifdef __cplusplus
}
#endif

#endif /* FUMI_ADAPTER_API_H */
