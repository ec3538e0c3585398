"""Accuracy and speed of the CPU backend's logistic function: the conv engine's vector gce_sigmoid16
(templates/conv_common.h.j2, fused epilogues) and the scalar glow_sigmoidf (templates/glow_prelude.h.j2, unfused
kernels), which must agree bit for bit.

    python bench/bench_sigmoid.py [--step 1]

Compiles a sweep with the backend's own templates, compiler and flags (toolchain.default_flags), runs both over
every ``--step``-th float32 in [-104, 18] (below, sigmoid rounds to 0 and the code returns 0; above, to 1) and
compares each result with the C library's double 1 / (1 + exp(-x)): the largest distance in float32 ULPs to the
correctly rounded result (what the conformance checker's ``ulp=k`` counts; its sigmoid bound is 4), the largest
error in ULPs of the exact value, the count of inputs where the two functions differ (must be 0), and special
values. Then the time per element: both in a loop over [-8, 8] (L1-resident), and x * sigmoid(x) (SiLU).
``--step 1`` (every float in the range, ~2.2e9) takes a few minutes on one core.
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_erf import run_sweep  # noqa: E402
from glow_cpu.templates import prelude_text, template  # noqa: E402

SWEEP = r"""
#include "glow_prelude.h"
#include "conv_common.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static int64_t ord(float f) { int32_t i; memcpy(&i, &f, 4); return i < 0 ? -(int64_t)(i & 0x7fffffff) : i; }
__attribute__((noinline)) static void scalar_sig(const float *x, float *y, int n) {
  for (int k = 0; k < n; ++k) y[k] = glow_sigmoidf(x[k]);
}
__attribute__((noinline)) static void vector_sig(const float *x, float *y, int n) {
  for (int k = 0; k < n; k += 16) gce_st16(y + k, gce_sigmoid16(gce_ld16(x + k)));
}
__attribute__((noinline)) static void vector_silu(const float *x, float *y, int n) {
  for (int k = 0; k < n; k += 16) { gce_v16 v = gce_ld16(x + k); gce_st16(y + k, v * gce_sigmoid16(v)); }
}
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static double ref(float x) { return x >= 0 ? 1.0 / (1.0 + exp(-(double)x)) : exp((double)x) / (1.0 + exp((double)x)); }
int main(int argc, char **argv) {
  const uint64_t step = (uint64_t)atoll(argv[1]);
  enum { B = 4096 };
  static float xs[B], ys[B], zs[B];
  int64_t maxd = 0; double maxe = 0; float at_d = 0, at_e = 0; uint64_t count = 0, differ = 0;
  /* two ranges of bit patterns: [+0, 18] and [-0, -104] */
  const uint32_t lo[2] = {0x00000000u, 0x80000000u}, hi[2] = {0x41900000u, 0xC2D00000u};
  for (int s = 0; s < 2; ++s)
    for (uint64_t u = lo[s]; u < hi[s]; u += step * B) {
      int n = 0;
      for (int k = 0; k < B && u + (uint64_t)k * step < hi[s]; ++k) {
        uint32_t b = (uint32_t)(u + k * step);
        memcpy(&xs[n++], &b, 4);
      }
      for (int k = n; k < (n + 15) / 16 * 16; ++k) xs[k] = 0.0f;
      scalar_sig(xs, ys, n);
      vector_sig(xs, zs, (n + 15) / 16 * 16);
      for (int k = 0; k < n; ++k) {
        differ += memcmp(&ys[k], &zs[k], 4) != 0;
        const double r = ref(xs[k]);
        const float rf = (float)r;
        const int64_t d = llabs(ord(ys[k]) - ord(rf));
        const double ulp = rf == 0.0f ? 0x1p-149 : (double)nextafterf(fabsf(rf), INFINITY) - fabs((double)rf);
        const double e = fabs((double)ys[k] - r) / ulp;
        if (d > maxd) { maxd = d; at_d = xs[k]; }
        if (e > maxe) { maxe = e; at_e = xs[k]; }
        ++count;
      }
    }
  printf("glow_sigmoidf over %llu floats in [-104, 18]: at most %lld ULP from the correctly rounded sigmoid (at %a), "
         "%.3f ULP from the exact value (at %a); gce_sigmoid16 differs on %llu\n", (unsigned long long)count,
         (long long)maxd, at_d, maxe, at_e, (unsigned long long)differ);
  const float sp[16] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 0x1p-149f, -0x1p-149f, 88.8f, -88.8f, -103.0f,
                        -104.0f, -1e30f, 1e30f, 17.0f, 17.5f, -16.0f};
  float sv[16];
  vector_sig(sp, sv, 16);
  for (unsigned i = 0; i < 16; ++i) {
    const float g = glow_sigmoidf(sp[i]), w = (float)ref(sp[i]);
    const int same = (g != g && w != w) || memcmp(&g, &w, 4) == 0;
    const int vsame = (g != g && sv[i] != sv[i]) || memcmp(&g, &sv[i], 4) == 0;
    printf("  sigmoid(%a) = %a (double %a)%s%s\n", sp[i], g, w, same ? "" : "  DIFFERENT",
           vsame ? "" : "  VECTOR DIFFERS");
  }
  const int n = 1 << 12;
  float *x = aligned_alloc(64, n * sizeof *x), *y = aligned_alloc(64, n * sizeof *y);
  for (int k = 0; k < n; ++k) x[k] = -8.0f + 16.0f * (float)k / n;
  double best[3] = {1e9, 1e9, 1e9};
  for (int r = 0; r < 2000; ++r)
    for (int f = 0; f < 3; ++f) {
      double t = now();
      (f == 0 ? scalar_sig : f == 1 ? vector_sig : vector_silu)(x, y, n);
      t = now() - t;
      if (t < best[f]) best[f] = t;
    }
  printf("time per element over [-8, 8]: glow_sigmoidf loop %.3f ns, gce_sigmoid16 %.3f ns, silu %.3f ns\n",
         best[0] * 1e9 / n, best[1] * 1e9 / n, best[2] * 1e9 / n);
  return 0;
}
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--step", type=int, default=1, help="sweep every STEP-th float (default 1: all of them)")
    args = ap.parse_args(argv)
    return run_sweep(SWEEP, args.step, {"glow_prelude.h": prelude_text(),
                                        "conv_common.h": template("conv_common.h.j2").render(cb=16)})

if __name__ == "__main__":
    sys.exit(main())
