/* fumi/simd.h — how fumi's whole-tensor loops are vectorised, for the host and for plugins.
 *
 * FUMI_SIMD(clauses): an `omp simd` loop. Loops reducing with max or + vectorise only where the
 * compiler may reorder the reduction; fumi_add_plugin (and libfumi's kernel sources) build with
 * -fopenmp-simd and FUMI_OPENMP_SIMD, which turns these on (sums then add in another order: the
 * last bits of a norm may differ). Elsewhere they are plain loops.
 * FUMI_WIDE: the function compiled for the widest vectors the CPU has (AVX-512, AVX2 or the
 * x86-64 baseline, chosen once at load time), where GCC can: the x86-64 baseline has 2-wide
 * fp64 vectors only. Not under ThreadSanitizer: the clones' ifunc resolvers run while the
 * library is relocated, before the TSan runtime is up, and their instrumentation crashes. */
#ifndef FUMI_SIMD_H
#define FUMI_SIMD_H

#if defined(FUMI_OPENMP_SIMD)
#define FUMI_PRAGMA(x) _Pragma(#x)
#define FUMI_SIMD(clauses) FUMI_PRAGMA(omp simd clauses)
#else
#define FUMI_SIMD(clauses)
#endif

#if defined(FUMI_OPENMP_SIMD) && defined(__x86_64__) && defined(__GNUC__) && \
    !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define FUMI_WIDE __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define FUMI_WIDE
#endif

#endif /* FUMI_SIMD_H */
