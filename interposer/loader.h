// loader.h — libfumi's dlopen wrapper (loader.cpp).
#pragma once

namespace fumi {

// dlopen(file, mode) as if called from the object containing `caller`.
void* dlopenAsCaller(const char* file, int mode, const void* caller);

// dlsym(handle, name) as if called from the object containing `caller`.
void* dlsymAsCaller(void* handle, const char* name, const void* caller);
// What fumi's dlsym wrapper returns for a lookup that found `found`: fumi's own hook for a
// name it intercepts, when the hook would forward to that same function; `found` otherwise.
void* interposeLookup(void* handle, const char* name, void* found, const void* caller);

// Called after every successful dlopen in the process: attaches the PyTorch adapter when
// libtorch has appeared (adapter.cpp).
void onLibraryLoaded();

}  // namespace fumi
