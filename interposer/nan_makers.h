// nan_makers.h — which ops make NaN/Inf of finite values, and which pass values along: what a
// NaN origin found looking back (nan_search.h) names as the likeliest maker of values whose
// results between were gone, and what `fumi report` says of it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fumi {

// An op's name without its overload or call number ("aten::sqrt #247", "aten::div.Tensor" ->
// "aten::sqrt", "aten::div"), and without the in-place form's `_`.
std::string bareOp(const std::string& call);

// Whether op `call` ("aten::log #3") has a restricted domain or overflows (log of 0, a division
// by 0, exp of a large number): the ops likelyMakers names first.
bool restrictedDomain(const std::string& call);

// Whether op `call` may make +Inf of finite values (a log or a sqrt never does).
bool makesPositiveInf(const std::string& call);

// Of a looked-back origin's chain (the ops followed back, in the order they ran, then the op
// holding the values), the positions of those that most likely made the values, likeliest
// first (see nan_makers.cpp). `hops` (how near the holder each ran) and `phases` (where each
// ran: "forward", "backward", ...): parallel to `chain`, or empty where not known.
// `positive_inf`: the holder holds +Inf, which some of those ops never make of finite values.
std::vector<size_t> likelyMakers(const std::vector<std::string>& chain,
                                 const std::vector<uint64_t>& hops,
                                 const std::vector<std::string>& phases, bool nan_from_inf,
                                 bool positive_inf = false);

}  // namespace fumi
