// engine_notes.h — the names of cuDNN engines' numerical notes (cudnnBackendNumericalNote_t,
// index = enum value), as events report them (`args.notes`) and policies match them
// (`match: { note: [...] }`). Kept free of cuDNN headers: the policy parser needs the names on
// builds without cuDNN.
#pragma once

#include <cstddef>
#include <cstring>
#include <string>

namespace fumi {

inline constexpr const char* kEngineNoteNames[] = {
    "tensor_core",        "down_convert_inputs", "reduced_precision_reduction",
    "fft",                "nondeterministic",    "winograd",
    "winograd_tile_4x4",  "winograd_tile_6x6",   "winograd_tile_13x13",
    "strict_nan_prop"};
inline constexpr size_t kEngineNoteCount = sizeof(kEngineNoteNames) / sizeof(kEngineNoteNames[0]);

inline bool isEngineNote(const char* name) {
  for (const char* n : kEngineNoteNames)
    if (std::strcmp(n, name) == 0) return true;
  return false;
}

// "tensor_core, down_convert_inputs, ...", for messages.
inline std::string engineNoteList() {
  std::string s;
  for (const char* n : kEngineNoteNames) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

}  // namespace fumi
