// call.cpp — Call model bookkeeping.
#include "call.h"

#include <charconv>

#include "site.h"

namespace fumi {

std::string formatScalar(double v) {
  char buf[32];
  const std::to_chars_result r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

Call::Call(OpSite& site, fumi_dtype dtype, fumi_dtype compute, int64_t size,
           uint64_t call_index)
    : site_(site), size_(size) {
  info_.struct_size = sizeof(info_);
  info_.op = site.name;
  info_.backend = site.backend;
  info_.dtype = dtype;
  info_.compute = compute;
  info_.call_index = call_index;
  tensors_.reserve(6);
  args_.reserve(8);
}

int Call::addTensor(const char* name, fumi_role role, fumi_dtype dtype, fumi_memory memory,
                    std::initializer_list<int64_t> shape, std::initializer_list<int64_t> strides,
                    void* data) {
  fumi_tensor t{};
  t.struct_size = sizeof(t);
  t.name = name;
  t.dtype = dtype;
  t.memory = memory;
  t.role = role;
  t.ndim = static_cast<int32_t>(shape.size());
  int d = 0;
  for (int64_t s : shape) t.shape[d++] = s;
  d = 0;
  for (int64_t s : strides) t.strides[d++] = s;
  t.data = data;
  return addTensor(t);
}

int Call::addTensor(const fumi_tensor& t) {
  tensors_.push_back(t);
  tensors_.back().struct_size = sizeof(fumi_tensor);
  return static_cast<int>(tensors_.size()) - 1;
}

bool Call::keptScan(int32_t index, fumi_scan* out) const {
  if (index < 0 || static_cast<size_t>(index) >= scans_.size() ||
      !scans_[static_cast<size_t>(index)].first)
    return false;
  const uint32_t size = out->struct_size;
  *out = scans_[static_cast<size_t>(index)].second;
  out->struct_size = size;
  return true;
}

void Call::keepScan(int32_t index, const fumi_scan& scan) {
  if (index < 0 || static_cast<size_t>(index) >= tensors_.size()) return;
  if (scans_.size() < tensors_.size()) scans_.resize(tensors_.size(), {false, fumi_scan{}});
  scans_[static_cast<size_t>(index)] = {true, scan};
}

const fumi_call_info& Call::info() {
  info_.ntensors = static_cast<int32_t>(tensors_.size());
  info_.tensors = tensors_.data();
  return info_;
}

}  // namespace fumi
