// loader.h — libfumi's dlopen wrapper (loader.cpp).
#pragma once

namespace fumi {

// dlopen(file, mode) as if called from the object containing `caller`.
void* dlopenAsCaller(const char* file, int mode, const void* caller);

// Called after every successful dlopen in the process: attaches the PyTorch adapter when
// libtorch has appeared (adapter.cpp).
void onLibraryLoaded();

}  // namespace fumi
