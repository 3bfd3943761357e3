/*
 * wavert_runner.h — MLIR's runner utilities for programs written for mlir-runner: the
 * printMemref* / verifyMemRef* functions of libmlir_runner_utils, the print* functions that
 * vector.print lowers to and the helpers of libmlir_c_runner_utils (memrefCopy, rtclock, ...),
 * in a small C library of its own (libwavert_runner.so) that does not depend on libwavert.
 *
 * Names and ABI follow MLIR release 22 (mlir/include/mlir/ExecutionEngine/RunnerUtils.h and
 * CRunnerUtils.h): `printMemrefF32(int64_t rank, void *descriptor)` is what a call of
 * `func.call @printMemrefF32(%u) : (memref<*xf32>) -> ()` becomes after the LLVM lowering (an
 * unranked memref is {rank, pointer to the ranked descriptor}); `_mlir_ciface_printMemrefF32`
 * is the C-interface form that `llvm.emit_c_interface` / `llvm-request-c-wrappers` call, with a
 * pointer to the unranked descriptor. Ranked descriptors are MLIR's {allocated, aligned,
 * offset, sizes[rank], strides[rank]} with 64-bit fields; strides are in elements.
 *
 * Output is byte-identical to MLIR's (see the project's runner_formats.md): everything goes
 * to stdout through C stdio; printMemref* flushes stdout after its header line and after its
 * data (as std::endl does upstream), the scalar print* functions do not flush. verifyMemRef*
 * and printFlops write to stderr. Element types beyond upstream's set (I16, F16, BF16 memrefs)
 * follow the same rules. One deliberate difference: a dimension of size 0 prints `[]`
 * (upstream reads and prints the element past the end).
 *
 * Thread-compatible: calls from several threads interleave their output as stdio does.
 */
#ifndef WAVERT_RUNNER_H
#define WAVERT_RUNNER_H

#include <stdint.h>

#include "wavert.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define WAVERT_RUNNER_EXPORT __declspec(dllexport)
#else
#define WAVERT_RUNNER_EXPORT __attribute__((visibility("default")))
#endif

/* MLIR's rank-1 memref descriptor (the C-interface argument of stdSort* and shuffle) is
 * wavert.h's wavert_memref_1d: one declaration for every libwavert header (only the type is
 * used; nothing of libwavert is linked). */

/* MLIR's unranked memref descriptor. */
typedef struct wavert_unranked_memref {
  int64_t rank;
  void *descriptor; /* the ranked descriptor */
} wavert_unranked_memref;

/* ---- printMemref*: "Unranked Memref base@ = 0x... rank = R offset = O sizes = [..]
 * strides = [..] data = " then the nested data, each line ended by a newline. Element
 * formats: iN and index in decimal (index as uint64; i8 written as the character it holds, as
 * an ostream does), floating point as %g (f16/bf16 widened to float), complex as (re,im). */
WAVERT_RUNNER_EXPORT void printMemrefI8(int64_t rank, void *descriptor);
WAVERT_RUNNER_EXPORT void printMemrefI16(int64_t rank, void *descriptor);
WAVERT_RUNNER_EXPORT void printMemrefI32(int64_t rank, void *descriptor);
WAVERT_RUNNER_EXPORT void printMemrefI64(int64_t rank, void *descriptor);
WAVERT_RUNNER_EXPORT void printMemrefInd(int64_t rank, void *descriptor);
WAVERT_RUNNER_EXPORT void printMemrefF16(int64_t rank, void *descriptor);
WAVERT_RUNNER_EXPORT void printMemrefBF16(int64_t rank, void *descriptor);
WAVERT_RUNNER_EXPORT void printMemrefF32(int64_t rank, void *descriptor);
WAVERT_RUNNER_EXPORT void printMemrefF64(int64_t rank, void *descriptor);
WAVERT_RUNNER_EXPORT void printMemrefC32(int64_t rank, void *descriptor);
WAVERT_RUNNER_EXPORT void printMemrefC64(int64_t rank, void *descriptor);

/* The same, C-interface form (pointer to the unranked descriptor). */
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemrefI8(wavert_unranked_memref *memref);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemrefI16(wavert_unranked_memref *memref);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemrefI32(wavert_unranked_memref *memref);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemrefI64(wavert_unranked_memref *memref);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemrefInd(wavert_unranked_memref *memref);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemrefF16(wavert_unranked_memref *memref);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemrefBF16(wavert_unranked_memref *memref);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemrefF32(wavert_unranked_memref *memref);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemrefF64(wavert_unranked_memref *memref);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemrefC32(wavert_unranked_memref *memref);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemrefC64(wavert_unranked_memref *memref);

/* Ranked C-interface forms (pointer to a ranked descriptor of the rank in the name): the
 * same output with the prefix "Memref " instead of "Unranked Memref ". */
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemref0dF32(void *descriptor);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemref1dF32(void *descriptor);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemref2dF32(void *descriptor);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemref3dF32(void *descriptor);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemref4dF32(void *descriptor);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemref1dI8(void *descriptor);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemref1dI32(void *descriptor);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemref1dI64(void *descriptor);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemref1dF64(void *descriptor);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemref1dInd(void *descriptor);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemref1dC32(void *descriptor);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemref1dC64(void *descriptor);
/* A rank-2 memref of vector<4x4xf32> elements; each element prints as MLIR's Vector printer
 * does: "((1, 2, 3, 4),   (5, 6, 7, 8),   (9, 10, 11, 12),  (13, 14, 15, 16))". */
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemrefVector4x4xf32(void *descriptor);

/* The header line only ("Unranked Memref base@ = ... strides = [...]" and a newline). */
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemrefShapeI8(wavert_unranked_memref *memref);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemrefShapeI16(wavert_unranked_memref *memref);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemrefShapeI32(wavert_unranked_memref *memref);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemrefShapeI64(wavert_unranked_memref *memref);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemrefShapeF16(wavert_unranked_memref *memref);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemrefShapeBF16(wavert_unranked_memref *memref);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemrefShapeF32(wavert_unranked_memref *memref);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemrefShapeF64(wavert_unranked_memref *memref);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemrefShapeInd(wavert_unranked_memref *memref);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemrefShapeC32(wavert_unranked_memref *memref);
WAVERT_RUNNER_EXPORT void _mlir_ciface_printMemrefShapeC64(wavert_unranked_memref *memref);

/* ---- verifyMemRef*: compare `actual` with `expected` element by element and return the
 * number of mismatches, or -1 when rank, offset, sizes or strides differ (both headers are
 * then written to stderr, with no separator or newline, as upstream). As upstream, headers
 * are compared only for rank > 0. f32 / f64 elements match within a relative error of 1e-6 /
 * 1e-12 of the expected value (a NaN or infinity never matches, as upstream); f16 / bf16
 * (beyond upstream's set, as I8, I16 and I64) when their values are equal; the others must
 * be equal. The first 10 mismatches are written to stderr as "A != E offset = O" (elements
 * in printMemref's formats). Elements are read from the aligned pointers (upstream reads
 * from the allocated ones, which differ when the allocation was aligned). */
#define WAVERT_RUNNER_VERIFY(NAME)                                                        \
  WAVERT_RUNNER_EXPORT int64_t verifyMemRef##NAME(int64_t rank, void *actual,             \
                                                  void *expected);                        \
  WAVERT_RUNNER_EXPORT int64_t _mlir_ciface_verifyMemRef##NAME(                           \
      wavert_unranked_memref *actual, wavert_unranked_memref *expected);
WAVERT_RUNNER_VERIFY(I8)
WAVERT_RUNNER_VERIFY(I16)
WAVERT_RUNNER_VERIFY(I32)
WAVERT_RUNNER_VERIFY(I64)
WAVERT_RUNNER_VERIFY(Ind)
WAVERT_RUNNER_VERIFY(F16)
WAVERT_RUNNER_VERIFY(BF16)
WAVERT_RUNNER_VERIFY(F32)
WAVERT_RUNNER_VERIFY(F64)
WAVERT_RUNNER_VERIFY(C32)
WAVERT_RUNNER_VERIFY(C64)
#undef WAVERT_RUNNER_VERIFY

/* ---- vector.print and friends (stdout, no newline unless stated) ---------------------- */
WAVERT_RUNNER_EXPORT void printI64(int64_t value);   /* decimal */
WAVERT_RUNNER_EXPORT void printU64(uint64_t value);  /* decimal */
WAVERT_RUNNER_EXPORT void printF32(float value);     /* %g */
WAVERT_RUNNER_EXPORT void printF64(double value);    /* %g */
WAVERT_RUNNER_EXPORT void printF16(uint16_t bits);   /* IEEE binary16 bits, as float %g */
WAVERT_RUNNER_EXPORT void printBF16(uint16_t bits);  /* bfloat16 bits, as float %g */
WAVERT_RUNNER_EXPORT void printString(const char *text); /* as is (fputs) */
WAVERT_RUNNER_EXPORT void printCString(const char *text); /* as is */
WAVERT_RUNNER_EXPORT void printOpen(void);           /* "( " */
WAVERT_RUNNER_EXPORT void printClose(void);          /* " )" */
WAVERT_RUNNER_EXPORT void printComma(void);          /* ", " */
WAVERT_RUNNER_EXPORT void printNewline(void);        /* "\n" */
/* "<flops / 1e9 as %lf> GFLOPS\n" on stderr. */
WAVERT_RUNNER_EXPORT void printFlops(double flops);
/* Seconds since the Unix epoch (wall clock, microsecond resolution). */
WAVERT_RUNNER_EXPORT double rtclock(void);
/* Nanoseconds since the Unix epoch. */
WAVERT_RUNNER_EXPORT int64_t _mlir_ciface_nanoTime(void);

/* What vector.print calls for floating-point types without a print* of their own (f8*, f6*,
 * f4*, tf32): `bits` (zero-extended) in LLVM's APFloat semantics number `semantics`
 * (llvm::APFloatBase::Semantics: 0 half, 1 bfloat, 2 single, 3 double, 7-18 the 8-, 6- and
 * 4-bit types and tf32), printed as a double with "%lg", no newline (MLIR's
 * mlir_apfloat_wrappers). An unknown number writes a line to stderr and prints nothing. */
WAVERT_RUNNER_EXPORT void printApFloat(int32_t semantics, uint64_t bits);

/* malloc, aligned_alloc and free (what MLIR's LLVM lowering calls with
 * use-generic-functions). */
WAVERT_RUNNER_EXPORT void *mlirAlloc(uint64_t size);
WAVERT_RUNNER_EXPORT void *mlirAlignedAlloc(uint64_t alignment, uint64_t size);
WAVERT_RUNNER_EXPORT void mlirFree(void *pointer);
WAVERT_RUNNER_EXPORT void mlirAlignedFree(void *pointer);

/* A std::mt19937 engine seeded with `seed` (mod 2^32), owned by the caller and released by
 * rtdrand; NULL when out of memory. rtrand: a uniform integer in [0, bound], the same
 * sequence as libstdc++'s std::uniform_int_distribution<uint64_t> over that engine (as
 * upstream built with GCC 11+ libstdc++ draws it). Thread-compatible per engine. */
WAVERT_RUNNER_EXPORT void *rtsrand(uint64_t seed);
WAVERT_RUNNER_EXPORT uint64_t rtrand(void *generator, uint64_t bound);
WAVERT_RUNNER_EXPORT void rtdrand(void *generator);
/* A random permutation of 0..n-1 (n = sizes[0]) drawn with `generator` as libstdc++'s
 * std::shuffle draws it, written at the aligned pointer (the offset is ignored, as upstream). */
WAVERT_RUNNER_EXPORT void _mlir_ciface_shuffle(wavert_memref_1d *memref, void *generator);

/* Sort the first `n` elements (from the offset; unit stride expected) in ascending order.
 * Equal elements (0 and -0) may come out in another order than upstream's std::sort, and
 * NaNs, for which std::sort's result is undefined, anywhere. */
WAVERT_RUNNER_EXPORT void _mlir_ciface_stdSortI64(uint64_t n, wavert_memref_1d *memref);
WAVERT_RUNNER_EXPORT void _mlir_ciface_stdSortF64(uint64_t n, wavert_memref_1d *memref);
WAVERT_RUNNER_EXPORT void _mlir_ciface_stdSortF32(uint64_t n, wavert_memref_1d *memref);

/* memref.copy between non-contiguous memrefs (what the LLVM lowering calls): copy every
 * element of `source` (`element_size` bytes each) to the same position of `target`; both
 * have source's rank and sizes. An empty memref copies nothing. */
WAVERT_RUNNER_EXPORT void memrefCopy(int64_t element_size, wavert_unranked_memref *source,
                                     wavert_unranked_memref *target);

#ifdef __cplusplus
}
#endif
#endif /* WAVERT_RUNNER_H */
