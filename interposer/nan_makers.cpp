// nan_makers.cpp — the likeliest makers of a looked-back NaN origin's values (nan_makers.h).
#include "nan_makers.h"

#include <algorithm>
#include <iterator>

namespace fumi {

namespace {

template <size_t N>
bool listed(const std::string& bare, const char* const (&names)[N]) {
  return std::any_of(std::begin(names), std::end(names),
                     [&](const char* n) { return bare == n; });
}

// Ops with a restricted domain or that overflow: log of 0, sqrt of a negative, a division by 0,
// exp of a large number.
constexpr const char* kDomain[] = {
    "aten::log",   "aten::log2",    "aten::log10", "aten::log1p",  "aten::sqrt",
    "aten::rsqrt", "aten::div",     "aten::reciprocal", "aten::pow", "aten::exp",
    "aten::exp2",  "aten::expm1",   "aten::acos",  "aten::asin",   "aten::atanh",
    "aten::acosh", "aten::logit",   "aten::erfinv", "aten::lgamma", "aten::digamma",
    "aten::polygamma", "aten::xlogy", "aten::tan", "aten::sinh",  "aten::cosh"};
// Ops that copy, gather, view or fill what they are given: values pass through them unmade.
constexpr const char* kPassing[] = {
    "aten::copy",   "aten::cat",   "aten::stack",   "aten::clone", "aten::index",
    "aten::index_select", "aten::gather", "aten::masked_fill", "aten::fill",
    "aten::_to_copy", "aten::contiguous", "aten::where", "aten::zeros", "aten::ones",
    "aten::full", "aten::index_put", "aten::_index_put_impl", "aten::masked_scatter",
    "aten::repeat", "aten::flip", "aten::roll", "aten::constant_pad_nd", "aten::embedding",
    "aten::view", "aten::_unsafe_view", "aten::reshape", "aten::t", "aten::transpose",
    "aten::permute", "aten::expand", "aten::select", "aten::slice", "aten::narrow",
    "aten::unsqueeze", "aten::squeeze", "aten::unbind", "aten::split", "aten::chunk",
    "aten::unsafe_chunk", "aten::unsafe_split", "aten::detach", "aten::alias"};
// Of those, the ones that can put an Inf there (masked_fill of -inf).
constexpr const char* kFills[] = {"aten::masked_fill", "aten::fill", "aten::full",
                                  "aten::index_put", "aten::_index_put_impl",
                                  "aten::masked_scatter", "aten::where"};
}  // namespace

std::string bareOp(const std::string& call) {
  std::string s = call.substr(0, call.find(' '));
  const size_t colon = s.find("::");
  if (const size_t dot = s.find('.', colon == std::string::npos ? 0 : colon + 2);
      dot != std::string::npos)
    s.resize(dot);
  if (!s.empty() && s.back() == '_') s.pop_back();  // the in-place form
  return s;
}

// For values that appeared from finite ones, the kDomain ops, nearest the op holding them first
// where `hops` (its own 0) says how near each ran (a gradient's 0 * inf in a `mul`: the exp
// whose overflow it read, not the divisions before that exp). For NaN from Inf, the first op
// that computes with what it receives (not a copy or a view's write) after the first fill that
// can put the Inf there (masked_fill of -inf; none said without one: the ops before it made
// what it masked), or without a fill after the chain's beginning, the op that got the Inf (from
// a parameter, the data: an embedding of a row holding it, then a weight gradient's 0 * inf,
// batch 20's LSTM).
std::vector<size_t> likelyMakers(const std::vector<std::string>& chain,
                                 const std::vector<uint64_t>& hops, bool nan_from_inf) {
  std::vector<size_t> found;
  if (nan_from_inf) {
    const auto fill = std::find_if(chain.begin(), chain.end(),
                                   [](const std::string& c) { return listed(bareOp(c), kFills); });
    const auto first =
        std::find_if(fill == chain.end() ? chain.begin() : fill, chain.end(),
                     [](const std::string& c) { return !listed(bareOp(c), kPassing); });
    if (first != chain.end()) found.push_back(static_cast<size_t>(first - chain.begin()));
    return found;
  }
  for (size_t i = 0; i < chain.size(); ++i)
    if (listed(bareOp(chain[i]), kDomain)) found.push_back(i);
  if (hops.size() == chain.size())
    std::stable_sort(found.begin(), found.end(),
                     [&](size_t a, size_t b) { return hops[a] < hops[b]; });
  return found;
}

}  // namespace fumi
