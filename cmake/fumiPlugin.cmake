# fumiPlugin.cmake — fumi_add_plugin(), the one way to build a check plugin. Used by fumi's own
# plugins (plugins/CMakeLists.txt) and installed with the CMake package (lib/cmake/fumi), so an
# out-of-tree plugin gets exactly the same library:
#
#   find_package(fumi REQUIRED)
#   fumi_add_plugin(absmax absmax.cpp)        # or: fumi_add_plugin(NAME absmax SOURCES ...)
#
# builds target fumi_<name>, the MODULE library libfumi_<name>.so that fumi's plugin loader
# looks for (interposer/plugin_loader.cpp), compiled against target fumi::plugin (the headers:
# fumi/plugin.h, the C ABI, and the optional C++ helpers fumi/plugin_host.h, fumi/metrics.h).
# Symbols are hidden, the version script fumi_plugin.map exports fumi_plugin_entry alone, and
# --no-undefined makes a plugin that depends on a symbol of libfumi (or anything not linked in)
# fail at link time rather than at dlopen.
#
# Optional variables, read when the function is called:
#   FUMI_PLUGIN_OUTPUT_DIR   where the library is built (default: CMake's usual place)
#   FUMI_PLUGIN_INSTALL_DIR  when set, `cmake --install` puts the library there
if(CMAKE_VERSION VERSION_LESS 3.17)
  message(FATAL_ERROR "fumi_add_plugin needs CMake 3.17 or newer (this is ${CMAKE_VERSION})")
endif()

function(fumi_add_plugin)
  cmake_parse_arguments(PARSE_ARGV 0 ARG "" "NAME" "SOURCES")
  set(sources ${ARG_SOURCES})
  if(NOT ARG_NAME AND ARG_UNPARSED_ARGUMENTS)  # the short form: <name> <source>...
    list(POP_FRONT ARG_UNPARSED_ARGUMENTS ARG_NAME)
    list(APPEND sources ${ARG_UNPARSED_ARGUMENTS})
  elseif(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "fumi_add_plugin: unexpected arguments: ${ARG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT ARG_NAME OR NOT sources)
    message(FATAL_ERROR "fumi_add_plugin: a name and at least one source are required")
  endif()
  if(NOT ARG_NAME MATCHES "^[A-Za-z0-9_]+$")
    message(FATAL_ERROR "fumi_add_plugin: '${ARG_NAME}' is not a plugin name ([A-Za-z0-9_]+)")
  endif()
  if(NOT TARGET fumi::plugin)
    message(FATAL_ERROR "fumi_add_plugin: target fumi::plugin is missing (find_package(fumi))")
  endif()

  set(target fumi_${ARG_NAME})
  set(map ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/fumi_plugin.map)
  add_library(${target} MODULE ${sources})
  target_link_libraries(${target} PRIVATE fumi::plugin)
  # A check's loops over whole tensors are numeric kernels: -O3 whatever the build type, the
  # metrics' reductions (fumi/metrics.h, FUMI_SIMD) vectorised as `omp simd` loops, and
  # -fno-trapping-math so that selects between computed values vectorise (checks never read
  # fp exception flags; results stay IEEE, nothing is reassociated outside FUMI_SIMD), and
  # -fno-math-errno so that square roots vectorise (checks never read errno after math calls:
  # checksum.h draws its Gaussian vectors in vector loops).
  set(gnu_like $<OR:$<CXX_COMPILER_ID:GNU>,$<CXX_COMPILER_ID:Clang>>)
  target_compile_options(${target} PRIVATE
    $<${gnu_like}:-O3 -fopenmp-simd -fno-trapping-math -fno-math-errno>)
  target_compile_definitions(${target} PRIVATE $<${gnu_like}:FUMI_OPENMP_SIMD=1>)
  target_link_options(${target} PRIVATE
    "LINKER:--version-script=${map}"
    "LINKER:--no-undefined")
  # libfumi_<name>.so whatever the platform defaults or the project's settings are.
  set_target_properties(${target} PROPERTIES
    PREFIX "lib"
    SUFFIX ".so"
    OUTPUT_NAME fumi_${ARG_NAME}
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    LINK_DEPENDS ${map})
  if(FUMI_PLUGIN_OUTPUT_DIR)
    set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${FUMI_PLUGIN_OUTPUT_DIR})
  endif()
  if(FUMI_PLUGIN_INSTALL_DIR)
    install(TARGETS ${target} LIBRARY DESTINATION ${FUMI_PLUGIN_INSTALL_DIR})
  endif()
endfunction()
