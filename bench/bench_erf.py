"""Accuracy and speed of the CPU backend's vectorized erf (glow_erff in templates/glow_prelude.h.j2).

    python bench/bench_erf.py [--step 1]

Compiles a sweep with the backend's own prelude, compiler and flags (toolchain.default_flags), runs glow_erff
over every ``--step``-th float32 in [0, 4.5] (erf is odd and the code symmetric in sign; above 3.93 the input
is clamped, so every larger float gives 1) in a loop the compiler vectorizes as in a kernel, and compares each
result with the C library's double erf of the same input: the largest distance in float32 ULPs to the
correctly rounded result (what the conformance checker's ``ulp=k`` counts), the largest error in ULPs of the
exact value, and the special values. Then the time per element of glow_erff against the C library's erff.
``--step 1`` (every float in the range, ~1.1e9) takes about a minute on one core.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from glow_cpu.build import toolchain  # noqa: E402
from glow_cpu.templates import prelude_text  # noqa: E402

SWEEP = r"""
#include "glow_prelude.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static int64_t ord(float f) { int32_t i; memcpy(&i, &f, 4); return i < 0 ? -(int64_t)(i & 0x7fffffff) : i; }
__attribute__((noinline)) static void vec_erf(const float *x, float *y, int n) {
  for (int k = 0; k < n; ++k) y[k] = glow_erff(x[k]);
}
__attribute__((noinline)) static void lib_erf(const float *x, float *y, int n) {
  for (int k = 0; k < n; ++k) y[k] = erff(x[k]);
}
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
int main(int argc, char **argv) {
  const uint64_t step = (uint64_t)atoll(argv[1]), hi = 0x40900000u; /* 4.5f */
  enum { B = 4096 };
  static float xs[B], ys[B];
  int64_t maxd = 0; double maxe = 0; float at_d = 0, at_e = 0; uint64_t count = 0;
  for (uint64_t u = 0; u < hi; u += step * B) {
    int n = 0;
    for (int k = 0; k < B && u + (uint64_t)k * step < hi; ++k) {
      uint32_t b = (uint32_t)(u + k * step);
      memcpy(&xs[n++], &b, 4);
    }
    vec_erf(xs, ys, n);
    for (int k = 0; k < n; ++k) {
      const double ref = erf((double)xs[k]);
      const float rf = (float)ref;
      const int64_t d = llabs(ord(ys[k]) - ord(rf));
      const double ulp = rf == 0.0f ? 0x1p-149 : (double)nextafterf(fabsf(rf), INFINITY) - fabs((double)rf);
      const double e = fabs((double)ys[k] - ref) / ulp;
      if (d > maxd) { maxd = d; at_d = xs[k]; }
      if (e > maxe) { maxe = e; at_e = xs[k]; }
      ++count;
    }
  }
  printf("glow_erff over %llu floats in [0, 4.5]: at most %lld ULP from the correctly rounded erf (at %a), "
         "%.3f ULP from the exact value (at %a)\n", (unsigned long long)count, (long long)maxd, at_d, maxe, at_e);
  const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 0x1p-149f, -0x1p-149f, 0x1p-127f, 3.93f, -5.0f, 1e30f};
  for (unsigned i = 0; i < sizeof sp / sizeof *sp; ++i) {
    const float g = glow_erff(sp[i]), w = (float)erf((double)sp[i]);
    int same = (g != g && w != w) || memcmp(&g, &w, 4) == 0;
    printf("  erf(%a) = %a (C library %a)%s\n", sp[i], g, w, same ? "" : "  DIFFERENT");
  }
  const int n = 1 << 16;
  float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
  for (int k = 0; k < n; ++k) x[k] = -5.0f + 10.0f * (float)k / n;
  double best[2] = {1e9, 1e9};
  for (int r = 0; r < 200; ++r)
    for (int f = 0; f < 2; ++f) {
      double t = now();
      (f ? lib_erf : vec_erf)(x, y, n);
      t = now() - t;
      if (t < best[f]) best[f] = t;
    }
  printf("time per element over [-5, 5]: glow_erff %.2f ns, C library erff %.2f ns\n", best[0] * 1e9 / n,
         best[1] * 1e9 / n);
  return 0;
}
"""


def run_sweep(source: str, step: int, headers: dict[str, str]) -> int:
    """Compile the C ``source`` (which includes the ``headers``, name -> text) with the CPU backend's compiler and
    default flags as an executable, run it with ``step`` as its argument, and return its exit status."""
    flags = [f for f in toolchain.default_flags(1) if f not in ("-fPIC", "-shared")]
    with tempfile.TemporaryDirectory() as d:
        for name, text in {**headers, "sweep.c": source}.items():
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        exe = os.path.join(d, "sweep")
        subprocess.run(toolchain.find_compiler() + flags + ["-I", d, os.path.join(d, "sweep.c"), "-o", exe, "-lm"],
                       check=True)
        print("flags:", " ".join(flags))
        return subprocess.run([exe, str(step)]).returncode


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--step", type=int, default=1, help="sweep every STEP-th float (default 1: all of them)")
    args = ap.parse_args(argv)
    return run_sweep(SWEEP, args.step, {"glow_prelude.h": prelude_text()})

if __name__ == "__main__":
    sys.exit(main())
