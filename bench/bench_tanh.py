"""Accuracy and speed of the CPU backend's tanh (glow_tanhf, templates/glow_prelude.h.j2: the tanh primitive's
float kernel, fused gelu_tanh epilogues and the whole Gelu op's tanh form).

    python bench/bench_tanh.py [--step 1]

Compiles a sweep with the backend's own templates, compiler and flags (toolchain.default_flags), runs glow_tanhf
over every ``--step``-th float32 in [0, 9.5] (odd: the negative half mirrors it bit for bit, checked on a sample;
above, tanh rounds to 1 and so does the code) and compares each result with the C library's double tanh: the
largest distance in float32 ULPs to the correctly rounded result (what the conformance checker's ``ulp=k``
counts; its bound for transcendental primitives is 4) and the largest error in ULPs of the exact value; then
special values, and the time per element of a loop over [-8, 8] (L1-resident) against libm's tanhf.
``--step 1`` (every float in the range, ~1.1e9) takes a minute or two on one core.
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_erf import run_sweep  # noqa: E402
from glow_cpu.templates import prelude_text  # noqa: E402

SWEEP = r"""
#include "glow_prelude.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static int64_t ord(float f) { int32_t i; memcpy(&i, &f, 4); return i < 0 ? -(int64_t)(i & 0x7fffffff) : i; }
__attribute__((noinline)) static void glow_loop(const float *x, float *y, int n) {
  for (int k = 0; k < n; ++k) y[k] = glow_tanhf(x[k]);
}
__attribute__((noinline)) static void libm_loop(const float *x, float *y, int n) {
  for (int k = 0; k < n; ++k) y[k] = tanhf(x[k]);
}
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
  const uint64_t step = (uint64_t)atoll(argv[1]);
  enum { B = 4096 };
  static float xs[B], ys[B], ns[B], zs[B];
  int64_t maxd = 0; double maxe = 0; float at_d = 0, at_e = 0; uint64_t count = 0, odd = 0;
  const uint32_t hi = 0x41180000u;  /* 9.5 */
  for (uint64_t u = 0; u < hi; u += step * B) {
    int n = 0;
    for (int k = 0; k < B && u + (uint64_t)k * step < hi; ++k) {
      uint32_t b = (uint32_t)(u + k * step);
      memcpy(&xs[n], &b, 4);
      ns[n] = -xs[n];
      ++n;
    }
    glow_loop(xs, ys, n);
    glow_loop(ns, zs, n);
    for (int k = 0; k < n; ++k) {
      odd += ys[k] != -zs[k];
      const double r = tanh((double)xs[k]);
      const float rf = (float)r;
      const int64_t d = llabs(ord(ys[k]) - ord(rf));
      const double ulp = rf == 0.0f ? 0x1p-149 : (double)nextafterf(fabsf(rf), INFINITY) - fabs((double)rf);
      const double e = fabs((double)ys[k] - r) / ulp;
      if (d > maxd) { maxd = d; at_d = xs[k]; }
      if (e > maxe) { maxe = e; at_e = xs[k]; }
      ++count;
    }
  }
  printf("glow_tanhf over %llu floats in [0, 9.5]: at most %lld ULP from the correctly rounded tanh (at %a), %.3f ULP "
         "from the exact value (at %a); tanh(-x) != -tanh(x) on %llu\n", (unsigned long long)count, (long long)maxd,
         at_d, maxe, at_e, (unsigned long long)odd);
  const float sp[12] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 0x1p-149f, -0x1p-149f, 0.625f, -0.625f, 9.0f,
                        9.1f, -1e30f};
  float sv[12];
  glow_loop(sp, sv, 12);
  int bad = 0;
  for (unsigned i = 0; i < 12; ++i) {
    const float w = tanhf(sp[i]);
    const int same = (sv[i] != sv[i] && w != w) || memcmp(&sv[i], &w, 4) == 0;
    bad += !same && !(llabs(ord(sv[i]) - ord(w)) <= 2 && w == w);
    printf("  tanh(%a) = %a (libm %a)%s\n", sp[i], sv[i], w, same ? "" : "  different");
  }
  const int n = 1 << 12;
  float *x = aligned_alloc(64, n * sizeof *x), *y = aligned_alloc(64, n * sizeof *y);
  for (int k = 0; k < n; ++k) x[k] = -8.0f + 16.0f * (float)k / n;
  double best[2] = {1e9, 1e9};
  for (int r = 0; r < 2000; ++r)
    for (int f = 0; f < 2; ++f) {
      double t = now();
      (f == 0 ? glow_loop : libm_loop)(x, y, n);
      t = now() - t;
      if (t < best[f]) best[f] = t;
    }
  printf("time per element over [-8, 8]: glow_tanhf loop %.3f ns, libm tanhf loop %.3f ns\n", best[0] * 1e9 / n,
         best[1] * 1e9 / n);
  return (maxd > 2 || odd || bad) ? 1 : 0;
}
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--step", type=int, default=1, help="sweep every STEP-th float (default 1: all of them)")
    args = ap.parse_args(argv)
    return run_sweep(SWEEP, args.step, {"glow_prelude.h": prelude_text()})


if __name__ == "__main__":
    sys.exit(main())
