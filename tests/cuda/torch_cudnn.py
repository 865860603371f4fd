"""A cuDNN call made inside a PyTorch operator, for fumi's CUDA tests: the operator
`fumitest::conv` (registered with torch.library, CPU kernel written in Python) runs a legacy
cudnnConvolutionForward through ctypes on the loaded libcudnn.so.9 (the simulated device's
stand-in under the tests; ctypes reaches it with dlsym on a library handle). Prints a hash of
the result so runs with and without fumi compare bit for bit.
Usage: torch_cudnn.py"""
import ctypes
import hashlib
import sys

import torch

CUDART = ctypes.CDLL("libcudart.so.13")
CUDNN = ctypes.CDLL("libcudnn.so.9")
H2D, D2H = 1, 2
FLOAT, NCHW, XCORR, FMA_MATH = 0, 0, 1, 3  # cudnnDataType_t, format, mode, math type


def ok(status, what):
    if status != 0:
        sys.exit(f"{what}: status {status}")


def device_copy(t):
    """A device buffer holding the float tensor t (contiguous)."""
    p = ctypes.c_void_p()
    ok(CUDART.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(t.numel() * 4)), "cudaMalloc")
    ok(CUDART.cudaMemcpy(p, ctypes.c_void_p(t.data_ptr()), ctypes.c_size_t(t.numel() * 4), H2D),
       "cudaMemcpy")
    return p


def tensor_desc(shape):
    d = ctypes.c_void_p()
    ok(CUDNN.cudnnCreateTensorDescriptor(ctypes.byref(d)), "cudnnCreateTensorDescriptor")
    ok(CUDNN.cudnnSetTensor4dDescriptor(d, NCHW, FLOAT, *shape), "cudnnSetTensor4dDescriptor")
    return d


def conv_impl(x):
    """y = x cross-correlated with a fixed 3x3 filter (padding 1), on the device via cuDNN."""
    x = x.contiguous()
    n, c, h, w = x.shape
    weight = (torch.arange(c * c * 9, dtype=torch.float32).reshape(c, c, 3, 3) % 5 - 2) / 2
    handle = ctypes.c_void_p()
    ok(CUDNN.cudnnCreate(ctypes.byref(handle)), "cudnnCreate")
    xd, yd = tensor_desc((n, c, h, w)), tensor_desc((n, c, h, w))
    wd, cd = ctypes.c_void_p(), ctypes.c_void_p()
    ok(CUDNN.cudnnCreateFilterDescriptor(ctypes.byref(wd)), "cudnnCreateFilterDescriptor")
    ok(CUDNN.cudnnSetFilter4dDescriptor(wd, FLOAT, NCHW, c, c, 3, 3), "cudnnSetFilter4dDescriptor")
    ok(CUDNN.cudnnCreateConvolutionDescriptor(ctypes.byref(cd)), "cudnnCreateConvolutionDescriptor")
    ok(CUDNN.cudnnSetConvolution2dDescriptor(cd, 1, 1, 1, 1, 1, 1, XCORR, FLOAT),
       "cudnnSetConvolution2dDescriptor")
    ok(CUDNN.cudnnSetConvolutionMathType(cd, FMA_MATH), "cudnnSetConvolutionMathType")
    xp, wp = device_copy(x), device_copy(weight)
    y = torch.empty_like(x)
    yp = device_copy(y)
    alpha, beta = ctypes.c_float(1), ctypes.c_float(0)
    status = CUDNN.cudnnConvolutionForward(  # the cuDNN call
        handle, ctypes.byref(alpha), xd, xp, wd, wp, cd, 0, None, ctypes.c_size_t(0),
        ctypes.byref(beta), yd, yp)
    ok(status, "cudnnConvolutionForward")
    ok(CUDART.cudaMemcpy(ctypes.c_void_p(y.data_ptr()), yp, ctypes.c_size_t(y.numel() * 4), D2H),
       "cudaMemcpy")
    for p in (xp, wp, yp):
        CUDART.cudaFree(p)
    CUDNN.cudnnDestroy(handle)
    return y


LIB = torch.library.Library("fumitest", "DEF")
LIB.define("conv(Tensor x) -> Tensor")
LIB.impl("conv", conv_impl, "CPU")


def main():
    x = (torch.arange(2 * 3 * 6 * 6, dtype=torch.float32).reshape(2, 3, 6, 6) % 7 - 3) / 2
    y = torch.ops.fumitest.conv(x)  # the operator call
    print("conv", hashlib.sha256(y.numpy().tobytes()).hexdigest()[:16])


if __name__ == "__main__":
    main()
