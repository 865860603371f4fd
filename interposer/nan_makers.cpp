// nan_makers.cpp — the likeliest makers of a looked-back NaN origin's values (nan_makers.h).
#include "nan_makers.h"

#include <algorithm>
#include <iterator>
#include <tuple>

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
// Of those, the ones that leave their range only at an exact 0 (a division by it, 0 to a
// negative power): everywhere, mostly harmless (every mean and normalisation divides), so one of
// these counts as kAtZeroHops ops further than it ran (batch 21's HGCN: the forward exp that
// overflowed, not the distance's division beside it; batch 23's conformer: the log of a silent
// spectrum, two ops before the features' division by 3).
constexpr const char* kAtZero[] = {"aten::div", "aten::reciprocal", "aten::pow"};
// The normalisations: a batch's statistics overflow (squares of values past 1.8e19), only at
// such extremes. Restricted in range (kDomain) and counted as far as kAtZero's (a BN-LSTM's
// input at FLT_MAX, batch 24: its batch norm, not the `add` after it).
constexpr const char* kNorms[] = {"aten::batch_norm",    "aten::native_batch_norm",
                                  "aten::_batch_norm_impl_index", "aten::instance_norm",
                                  "aten::layer_norm",    "aten::native_layer_norm",
                                  "aten::group_norm",    "aten::native_group_norm"};
constexpr uint64_t kAtZeroHops = 2;
// Of kDomain, those that never make +Inf of finite values (a log's 0 is -inf, its negatives
// NaN): where the holder holds +Inf, someone else made it, and likely the rest too (batch 35's
// Cox loss: an exp's overflow through a masked sum into a log, the log named).
constexpr const char* kNoPositiveInf[] = {"aten::log",  "aten::log2", "aten::log10",
                                          "aten::log1p", "aten::sqrt", "aten::acos",
                                          "aten::asin",  "aten::acosh", "aten::digamma"};
// Ops that make no NaN or Inf of finite values (besides those passing values along): a holder
// that is one of them did not make what it holds, whatever the ops before it were (batch 23's
// knowledge-graph score: a `neg` holding the NaN of a sum of overflowed products).
constexpr const char* kExact[] = {
    "aten::neg", "aten::abs", "aten::relu", "aten::sign", "aten::clamp", "aten::clamp_min",
    "aten::clamp_max", "aten::maximum", "aten::minimum", "aten::max", "aten::min",
    "aten::sigmoid", "aten::tanh", "aten::hardtanh", "aten::logsigmoid", "aten::softmax",
    "aten::_softmax", "aten::log_softmax", "aten::_log_softmax", "aten::dropout",
    "aten::native_dropout", "aten::feature_dropout", "aten::sort", "aten::topk", "aten::floor",
    "aten::ceil", "aten::round", "aten::trunc", "aten::sin", "aten::cos", "aten::erf",
    "aten::gelu", "aten::silu", "aten::elu", "aten::leaky_relu", "aten::hardswish"};
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
// Ops that make NaN of a row all -inf (a masked attention row): where one holds NaN made of Inf,
// it made them, whatever computed with the Inf before it (the mask added by `baddbmm` in
// MultiheadAttention, which keeps it -inf: batch 24 named the `baddbmm`).
constexpr const char* kRowNan[] = {"aten::softmax", "aten::_softmax", "aten::log_softmax",
                                   "aten::_log_softmax", "aten::logsumexp"};
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

bool makesPositiveInf(const std::string& call) { return !listed(bareOp(call), kNoPositiveInf); }

bool restrictedDomain(const std::string& call) {
  const std::string bare = bareOp(call);
  return listed(bare, kDomain) || listed(bare, kNorms);
}

// For values that appeared from finite ones, the kDomain ops. Where `phases` says where each ran
// and the holder ran after the forward pass (a gradient, or its update in an optimizer step):
// those of the forward pass first, the holder among the rest (a gradient's NaN comes of its
// forward values: an exp's overflow times a gradient's 0, a sqrt's 0 its backward divides by —
// the line the user wrote — not the gradient's divisions it went through: batch 21's HGCN), and
// of those the ones leaving their domain at ordinary values before the kAtZero ones (the sqrt
// whose NaN a `where` dropped, its gradient NaN, nine ops behind the normalisations' divisions:
// batch 23). Then nearest the holder where `hops` (its own 0) says how near each ran (a
// gradient's 0 * inf in a `mul`: the exp whose overflow it read, not the divisions before that
// exp), kAtZero ones counted kAtZeroHops further, of two as near the later. For a holder after
// the forward pass the normalisations come last, whatever their phase: their forward pass ran
// on values no sentinel saw non-finite, and a batch norm's NaN, unlike a sqrt's, is no `where`'s
// to drop (a DANN-like job's feature extractor, its batch norm named before the gradient
// reversal's division by a zero norm). Without a kDomain op, where the holder is kExact or
// passes values along, the ops between that compute (an overflow: a product, a sum), nearest
// first. For NaN from Inf, the first op that computes with
// what it receives (not a copy or a view's write) after the first fill that can put the Inf
// there (masked_fill of -inf; none said without one: the ops before it made what it masked), or
// without a fill after the chain's beginning, the op that got the Inf (from a parameter, the
// data: an embedding of a row holding it, then a weight gradient's 0 * inf, batch 20's LSTM);
// a kRowNan holder itself.
std::vector<size_t> likelyMakers(const std::vector<std::string>& chain,
                                 const std::vector<uint64_t>& hops,
                                 const std::vector<std::string>& phases, bool nan_from_inf,
                                 bool positive_inf) {
  std::vector<size_t> found;
  if (nan_from_inf) {
    if (!chain.empty() && listed(bareOp(chain.back()), kRowNan)) {
      found.push_back(chain.size() - 1);
      return found;
    }
    const auto fill = std::find_if(chain.begin(), chain.end(),
                                   [](const std::string& c) { return listed(bareOp(c), kFills); });
    const auto first =
        std::find_if(fill == chain.end() ? chain.begin() : fill, chain.end(),
                     [](const std::string& c) { return !listed(bareOp(c), kPassing); });
    if (first != chain.end()) found.push_back(static_cast<size_t>(first - chain.begin()));
    return found;
  }
  if (chain.empty()) return found;
  const size_t holder = chain.size() - 1;
  for (size_t i = 0; i < chain.size(); ++i)
    if (restrictedDomain(chain[i])) found.push_back(i);
  const auto exact = [&](size_t i) {
    const std::string bare = bareOp(chain[i]);
    return listed(bare, kExact) || listed(bare, kPassing);
  };
  if (found.empty() && exact(holder))
    for (size_t i = 0; i < holder; ++i)
      if (!exact(i)) found.push_back(i);
  const auto after_forward = [&](size_t i) {
    return phases[i] == "backward" || phases[i] == "optimizer";
  };
  const bool by_phase = phases.size() == chain.size() && after_forward(holder);
  const bool by_hops = hops.size() == chain.size();
  const auto key = [&](size_t i) {
    const std::string bare = bareOp(chain[i]);
    const bool norm = listed(bare, kNorms);
    const bool at_zero = norm || listed(bare, kAtZero);
    // as near: the later one (the two batch norms feeding a BN-LSTM's gate sum, the input's the
    // later, batch 24)
    return std::make_tuple(by_phase && norm, by_phase && after_forward(i), by_phase && at_zero,
                           (by_hops ? hops[i] : uint64_t{0}) + (at_zero ? kAtZeroHops : 0),
                           at_zero, by_hops ? chain.size() - i : i);
  };
  std::stable_sort(found.begin(), found.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  if (positive_inf)
    std::stable_partition(found.begin(), found.end(),
                          [&](size_t i) { return makesPositiveInf(chain[i]); });
  return found;
}

}  // namespace fumi
