// loader.h — libfumi's dlopen wrapper (loader.cpp).
#pragma once

namespace fumi {

// dlopen(file, mode) as if called from the object containing `caller`.
void* dlopenAsCaller(const char* file, int mode, const void* caller);

// Called after every successful dlopen in the process (e.g. to attach the PyTorch adapter).
using LoadObserver = void (*)();
void setLoadObserver(LoadObserver observer);

}  // namespace fumi
