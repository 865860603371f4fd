# torch_api.cmake — which of torch's APIs the adapter uses where releases differ
# (interposer/torch/torch_compat.h), read from the installed headers under FUMI_TORCH_INCLUDE:
#   FUMI_TORCH_FP32_API      TF32 settings: 2 Float32Backend/Float32Op enums, 1 strings (2.9),
#                            0 allowTF32CuDNN()/allowTF32CuBLAS().
#   FUMI_TORCH_AUTOCAST_API  autocast state: 1 is_autocast_enabled(device type), 0 the older
#                            per-device functions.
#   FUMI_TORCH_STREAM_API    a stream's native handle: 2 c10::Stream::stream_handle(),
#                            1 native_handle(), 0 none (the default stream's is known: NULL).
# include()d by interposer/torch/CMakeLists.txt (sets FUMI_TORCH_API_DEFINITIONS), or run as
# `cmake -DFUMI_TORCH_INCLUDE=DIR -P cmake/torch_api.cmake` to print them (-D flags), for an
# adapter built by hand against another torch (docs/cuda.md).
file(READ ${FUMI_TORCH_INCLUDE}/ATen/Context.h fumi_context_h)
if(fumi_context_h MATCHES "float32Precision\\([ \n]*Float32Backend")
  set(fumi_fp32 2)
elseif(fumi_context_h MATCHES "float32Precision\\([ \n]*const std::string")
  set(fumi_fp32 1)
else()
  set(fumi_fp32 0)
endif()
file(READ ${FUMI_TORCH_INCLUDE}/ATen/autocast_mode.h fumi_autocast_h)
if(fumi_autocast_h MATCHES "is_autocast_enabled\\([ \n]*(at::|c10::)?DeviceType")
  set(fumi_autocast 1)
else()
  set(fumi_autocast 0)
endif()
file(READ ${FUMI_TORCH_INCLUDE}/c10/core/Stream.h fumi_stream_h)
if(fumi_stream_h MATCHES "void\\* stream_handle\\(\\) const")
  set(fumi_stream 2)
elseif(fumi_stream_h MATCHES "void\\* native_handle\\(\\) const")
  set(fumi_stream 1)
else()
  set(fumi_stream 0)
endif()
set(FUMI_TORCH_API_DEFINITIONS FUMI_TORCH_FP32_API=${fumi_fp32}
    FUMI_TORCH_AUTOCAST_API=${fumi_autocast} FUMI_TORCH_STREAM_API=${fumi_stream})
if(CMAKE_SCRIPT_MODE_FILE)
  execute_process(COMMAND ${CMAKE_COMMAND} -E echo
                  "-DFUMI_TORCH_FP32_API=${fumi_fp32} -DFUMI_TORCH_AUTOCAST_API=${fumi_autocast}"
                  "-DFUMI_TORCH_STREAM_API=${fumi_stream}")
endif()
