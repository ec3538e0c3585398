/* Glow Kit CPU backend prelude: helpers shared by every generated kernel (no model-specific content). */
#ifndef GLOW_PRELUDE_H
#define GLOW_PRELUDE_H
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

/* Error codes returned by kernels: (1-based instruction number) * 8 + kind. */
#define GLOW_ERR_INDEX 1
#define GLOW_ERR_DIV0 2
#define GLOW_ERR_NOMEM 3

#if defined(__GNUC__)
#define GLOW_INLINE static inline __attribute__((always_inline, unused))
#define GLOW_UNUSED __attribute__((unused))
#else
#define GLOW_INLINE static inline
#define GLOW_UNUSED
#endif

/* bfloat16 <-> float, round to nearest even; NaN stays a quiet NaN. */
GLOW_INLINE float glow_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
GLOW_INLINE uint16_t glow_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* NaN-propagating maximum / minimum (numpy.maximum / numpy.minimum). */
GLOW_INLINE float glow_maxf(float a, float b) { return (a != a || a > b) ? a : b; }
GLOW_INLINE float glow_minf(float a, float b) { return (a != a || a < b) ? a : b; }
GLOW_INLINE double glow_maxd(double a, double b) { return (a != a || a > b) ? a : b; }
GLOW_INLINE double glow_mind(double a, double b) { return (a != a || a < b) ? a : b; }

/* Python-style float remainder (sign of the divisor), as numpy.mod. */
GLOW_INLINE float glow_pymodf(float a, float b) {
  float r = fmodf(a, b);
  if (r != 0.0f) { if ((r < 0.0f) != (b < 0.0f)) r += b; }
  else r = copysignf(0.0f, b);
  return r;
}
GLOW_INLINE double glow_pymodd(double a, double b) {
  double r = fmod(a, b);
  if (r != 0.0) { if ((r < 0.0) != (b < 0.0)) r += b; }
  else r = copysign(0.0, b);
  return r;
}

/* Integer power by squaring with wrap-around (numpy int64 power of |b|). */
GLOW_INLINE int64_t glow_ipow(int64_t a, int64_t b) {
  uint64_t base = (uint64_t)a, r = 1u;
  uint64_t e = b < 0 ? (uint64_t)0 - (uint64_t)b : (uint64_t)b;
  while (e) {
    if (e & 1u) r *= base;
    base *= base;
    e >>= 1;
  }
  return (int64_t)r;
}

/* Safe signed integer division/remainder: callers check b != 0 first; INT_MIN / -1 wraps. */
GLOW_INLINE int64_t glow_sdiv(int64_t a, int64_t b) {
  if (b == 0) return 0;
  if (b == -1) return (int64_t)((uint64_t)0 - (uint64_t)a);
  return a / b;
}
GLOW_INLINE int64_t glow_srem(int64_t a, int64_t b) {
  if (b == 0 || b == -1) return 0;
  return a % b;
}
GLOW_INLINE int64_t glow_spymod(int64_t a, int64_t b) {
  int64_t r = glow_srem(a, b);
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}
GLOW_INLINE uint64_t glow_udiv(uint64_t a, uint64_t b) { return b ? a / b : 0u; }
GLOW_INLINE uint64_t glow_urem(uint64_t a, uint64_t b) { return b ? a % b : 0u; }

/* Numerically stable logistic function. */
GLOW_INLINE float glow_sigmoidf(float x) {
  if (x >= 0.0f) return 1.0f / (1.0f + expf(-x));
  float e = expf(x);
  return e / (1.0f + e);
}
GLOW_INLINE double glow_sigmoidd(double x) {
  if (x >= 0.0) return 1.0 / (1.0 + exp(-x));
  double e = exp(x);
  return e / (1.0 + e);
}

/* sign with NaN kept. */
GLOW_INLINE float glow_signf(float x) { return x != x ? x : (float)((x > 0.0f) - (x < 0.0f)); }
GLOW_INLINE double glow_signd(double x) { return x != x ? x : (double)((x > 0.0) - (x < 0.0)); }

/* Float -> integer as kernels.cast: truncate, NaN -> 0, clip to the largest doubles below +-2**63 (uint64:
   [0, 2**64)), then wrap to the target width. */
GLOW_INLINE double glow_trunc_nan0(double x) {
  double y = trunc(x);
  return y != y ? 0.0 : y;
}
GLOW_INLINE int64_t glow_f2i_wrap(double x) {
  double y = glow_trunc_nan0(x);
  if (y < -9223372036854775808.0) y = -9223372036854775808.0;
  if (y > 9223372036854774784.0) y = 9223372036854774784.0;
  return (int64_t)y;
}
GLOW_INLINE uint64_t glow_f2u64(double x) {
  double y = glow_trunc_nan0(x);
  if (y <= 0.0) return 0u;
  if (y > 18446744073709549568.0) y = 18446744073709549568.0;
  return (uint64_t)y;
}

/* 64-byte aligned scratch memory (freed with glow_free_aligned). */
GLOW_INLINE void *glow_alloc_aligned(size_t bytes) {
  void *raw = malloc(bytes + 64 + sizeof(void *));
  if (!raw) return NULL;
  uintptr_t p = ((uintptr_t)raw + sizeof(void *) + 63) & ~(uintptr_t)63;
  ((void **)p)[-1] = raw;
  return (void *)p;
}
GLOW_INLINE void glow_free_aligned(void *p) {
  if (p) free(((void **)p)[-1]);
}

#endif
