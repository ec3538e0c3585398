/* Glow Kit golden replay runner: runs the cases exported by `glowc conformance --backend NAME --export-golden DIR`
 * on the machine it is built for (a board, or qemu-user) and checks every output as the conformance checker did
 * on the host.
 *
 *   make -C DIR [CC=aarch64-linux-gnu-gcc]      builds DIR/replay from replay.c, entries.c and DIR/cases/ * /g_*.c
 *   DIR/replay DIR [-v] [--case TEXT]          prints each failure and a summary; exit status 0 when all passed
 *                                              (a case whose bundle did not compile is skipped: status 1)
 *
 * DIR/golden.txt lists the cases (glow_conformance.golden.golden_text): for each, the entry point, the weights
 * file, the inputs and outputs (dtype, bytes, the check of each output) and one or more input sets (input files,
 * expected outputs, per-element bounds). Each set runs on fresh memory: the constant region holds the weights,
 * the mutable and activations regions are filled with 0xFF (NaN for floats) before the inputs are copied in, so
 * an output element the code never writes shows.
 *
 * Checks (the checker's, element by element; little-endian data):
 *   bitwise  the bit patterns are equal (any NaN matches any NaN, also in the float8 formats)
 *   exact    the values are equal (+0 == -0, NaN matches NaN); integers and bool: equal
 *   lsb K    integers at most K apart
 *   bound K  floats: within K ULPs of the expected value in the result type (float16/bfloat16 in their own
 *            ULPs), or |got - expected| <= the element's bound (the setN/boundK.f64 file); NaN only where NaN is
 *            expected, infinities equal; with flush, an expected subnormal may come back as a zero of its sign.
 *            With a center file (a dot product's float64 reference, setN/centerK.f64) the bound is measured from
 *            it: |got - center| <= bound. With statistics (float32/float64 accumulations; a magnitude file of the
 *            sums of |a * b|, setN/magnitudeK.f64, and the reduction length N), an output whose elements all pass
 *            must also pass TOSA's dot-product tests: with err = (got - center) / (m * 2^-(M+1)) over the T
 *            finite elements whose unit m * 2^-(M+1) is at least 16 times the smallest subnormal (M the type's
 *            mantissa bits), |sum err| <= 2 sqrt(N T) and sum err^2 <= 0.4 N T. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replay.h"

#define MAX_IO 256
#define LINE 4096

enum check { CHECK_NONE, CHECK_BITWISE, CHECK_EXACT, CHECK_LSB, CHECK_BOUND };

struct io {
  char name[LINE / 4], dtype[32];
  size_t size, item;
  enum check check;
  unsigned long long param;
  int flush, stats;
  unsigned long long n;  /* the reduction length (statistics) */
  char file[LINE], bound[LINE], center[LINE], magnitude[LINE];
};

struct state {
  const char *dir;
  const struct golden_entry *e;
  char id[LINE], entry[128], weights[LINE], why[LINE];
  int n_in, n_out, sets, bad, prepared;
  struct io in[MAX_IO], out[MAX_IO];
  uint8_t *c, *m, *a;
  void *rc_, *rm_, *ra_;
};

static int verbose;

static uint8_t *alloc_aligned(size_t n, size_t align, void **raw) {
  if (align < 16) align = 16;
  *raw = malloc(n + align);
  if (!*raw) return NULL;
  return (uint8_t *)(((uintptr_t)*raw + align - 1) & ~(uintptr_t)(align - 1));
}

/* Read exactly `size` bytes of DIR/path into dst; 0 on success, else a message in why. */
static int read_exact(const struct state *s, const char *path, uint8_t *dst, size_t size, char *why) {
  char full[2 * LINE];
  snprintf(full, sizeof full, "%s/%s", s->dir, path);
  FILE *f = fopen(full, "rb");
  if (!f) { snprintf(why, LINE, "cannot open %s", full); return 1; }
  size_t got = size ? fread(dst, 1, size, f) : 0;
  int extra = fgetc(f) != EOF;
  fclose(f);
  if (got != size || extra) { snprintf(why, LINE, "%s: expected exactly %zu bytes", full, size); return 1; }
  return 0;
}

static const struct golden_entry *find_entry(const char *name) {
  for (int i = 0; i < golden_n_entries; ++i)
    if (strcmp(golden_entries[i].name, name) == 0) return &golden_entries[i];
  return NULL;
}

/* -- element access ----------------------------------------------------------------------------------------- */
static uint64_t load_bits(const uint8_t *p, size_t item) {
  uint8_t b1; uint16_t b2; uint32_t b4; uint64_t b8 = 0;
  switch (item) {
    case 1: memcpy(&b1, p, 1); return b1;
    case 2: memcpy(&b2, p, 2); return b2;
    case 4: memcpy(&b4, p, 4); return b4;
    default: memcpy(&b8, p, 8); return b8;
  }
}

static int is_float(const char *dt) {
  return !strcmp(dt, "float16") || !strcmp(dt, "bfloat16") || !strcmp(dt, "float32") || !strcmp(dt, "float64");
}

static int is_signed(const char *dt) { return !strncmp(dt, "int", 3); }

/* The storage formats of one byte (float8, float6, float4; ml_dtypes' encodings): whether dt is one, and
 * whether the code b is a NaN or a zero of it (a format's other codes each encode one value). */
static int small_float(const char *dt, unsigned b, int *nan, int *zero) {
  unsigned m = b & 0x7f;
  if (!strcmp(dt, "float8e4m3fn")) { *nan = m == 0x7f; *zero = m == 0; }
  else if (!strcmp(dt, "float8e5m2")) { *nan = m > 0x7c; *zero = m == 0; }
  else if (!strcmp(dt, "float8e4m3fnuz") || !strcmp(dt, "float8e5m2fnuz")) { *nan = b == 0x80; *zero = b == 0; }
  else if (!strcmp(dt, "float8e8m0")) { *nan = b == 0xff; *zero = 0; }
  else if (!strcmp(dt, "float4e2m1")) { *nan = 0; *zero = (b & 0x7) == 0; }
  else if (!strcmp(dt, "float6e2m3") || !strcmp(dt, "float6e3m2")) { *nan = 0; *zero = (b & 0x1f) == 0; }
  else return 0;
  return 1;
}

static double half_to_double(uint16_t h) {
  int e = (h >> 10) & 0x1f, f = h & 0x3ff;
  double v = e == 0 ? ldexp(f, -24) : e == 31 ? (f ? NAN : INFINITY) : ldexp(f + 1024, e - 25);
  return (h & 0x8000) ? -v : v;
}

/* The value of a float element of dtype dt with bits b, as a double (exact for every supported type). */
static double float_value(const char *dt, uint64_t b) {
  if (!strcmp(dt, "float16")) return half_to_double((uint16_t)b);
  if (!strcmp(dt, "bfloat16") || !strcmp(dt, "float32")) {
    uint32_t u = !strcmp(dt, "bfloat16") ? (uint32_t)b << 16 : (uint32_t)b;
    float f;
    memcpy(&f, &u, 4);
    return f;
  }
  double d;
  memcpy(&d, &b, 8);
  return d;
}

static int float_bits(const char *dt) { return !strcmp(dt, "float32") ? 32 : !strcmp(dt, "float64") ? 64 : 16; }

static double float_tiny(const char *dt) {
  return !strcmp(dt, "float16") ? ldexp(1, -14) : !strcmp(dt, "float64") ? ldexp(1, -1022) : ldexp(1, -126);
}

/* ULPs between two floats of one type: distance of their ordinals (+0 and -0 are 0 apart). */
static double ulp_distance(const char *dt, uint64_t g, uint64_t w) {
  int bits = float_bits(dt);
  uint64_t sign = (uint64_t)1 << (bits - 1), ma = g & ~sign, mb = w & ~sign;
  if ((g & sign) == (w & sign)) return (double)(ma > mb ? ma - mb : mb - ma);
  return (double)ma + (double)mb;
}

static int64_t signed_value(uint64_t b, size_t item) {
  switch (item) {
    case 1: return (int8_t)b;
    case 2: return (int16_t)b;
    case 4: return (int32_t)b;
    default: return (int64_t)b;
  }
}

static void describe(char *buf, size_t n, const char *dt, uint64_t b, size_t item) {
  if (is_float(dt)) snprintf(buf, n, "%.9g", float_value(dt, b));
  else if (is_signed(dt)) snprintf(buf, n, "%lld", (long long)signed_value(b, item));
  else if (!strcmp(dt, "raw") || !strncmp(dt, "float", 5)) snprintf(buf, n, "0x%llx", (unsigned long long)b);
  else snprintf(buf, n, "%llu", (unsigned long long)b);
}

/* TOSA's dot-product statistics of an output of n elements (float32 or float64): 0 when they pass. */
static int dot_product_statistics(const struct io *o, const uint8_t *got, const double *center,
                                  const double *magnitude, size_t n, char *why) {
  int mant = !strcmp(o->dtype, "float64") ? 52 : 23;
  double tiny = float_tiny(o->dtype), eps = ldexp(1, -mant), sum = 0, sumsq = 0, ks = o->n ? (double)o->n : 1;
  size_t t = 0;
  for (size_t i = 0; i < n; ++i) {
    double g = float_value(o->dtype, load_bits(got + i * o->item, o->item));
    double unit = magnitude[i] * ldexp(1, -(mant + 1));
    if (!isfinite(g) || !isfinite(center[i]) || !isfinite(magnitude[i]) || !(unit >= 16 * tiny * eps)) continue;
    double e = (g - center[i]) / unit;
    sum += e;
    sumsq += e * e;
    t++;
  }
  double limit_sum = 2 * sqrt(ks * (double)t), limit_sumsq = 0.4 * ks * (double)t;
  if (fabs(sum) > limit_sum) {
    snprintf(why, LINE, "output %s (%s): every element within its bound but the errors are biased: they sum to "
             "%.4g units of m * 2^-(M+1) over %zu elements, more than 2 sqrt(n T) = %.4g", o->name, o->dtype, sum, t,
             limit_sum);
    return 1;
  }
  if (sumsq > limit_sumsq) {
    snprintf(why, LINE, "output %s (%s): every element within its bound but the errors are too spread: the squared "
             "errors sum to %.4g units over %zu elements, more than 0.4 n T = %.4g", o->name, o->dtype, sumsq, t,
             limit_sumsq);
    return 1;
  }
  return 0;
}

/* Check one output; 0 when every element passes, else a message in why. */
static int check_output(const struct io *o, const uint8_t *got, const uint8_t *want, const double *bound,
                        const double *center, const double *magnitude, char *why) {
  size_t n = o->item ? o->size / o->item : 0, bad = 0, first = 0;
  int fl = is_float(o->dtype);
  for (size_t i = 0; i < n; ++i) {
    int ok;
    const uint8_t *pg = got + i * o->item, *pw = want + i * o->item;
    int gnan, gzero, wnan, wzero;
    if (o->item == 1 && small_float(o->dtype, *pg, &gnan, &gzero) && small_float(o->dtype, *pw, &wnan, &wzero)) {
      /* bitwise: equal codes, or NaN for NaN; exact: also a zero for a zero of the other sign */
      ok = *pg == *pw || (gnan && wnan) || (o->check == CHECK_EXACT && gzero && wzero);
    } else if (!strcmp(o->dtype, "raw") || (!fl && o->check != CHECK_LSB)) {
      ok = memcmp(pg, pw, o->item) == 0;
    } else if (!fl) {  /* lsb K */
      uint64_t g = load_bits(pg, o->item), w = load_bits(pw, o->item), d;
      if (is_signed(o->dtype)) {
        int64_t gs = signed_value(g, o->item), ws = signed_value(w, o->item);
        d = gs > ws ? (uint64_t)gs - (uint64_t)ws : (uint64_t)ws - (uint64_t)gs;
      } else {
        d = g > w ? g - w : w - g;
      }
      ok = d <= o->param;
    } else {
      uint64_t gb = load_bits(pg, o->item), wb = load_bits(pw, o->item);
      double g = float_value(o->dtype, gb), w = float_value(o->dtype, wb);
      if (isnan(g) || isnan(w)) {
        ok = isnan(g) && isnan(w);
      } else if (o->check == CHECK_BITWISE) {
        ok = gb == wb;
      } else if (o->check == CHECK_EXACT) {
        ok = g == w;
      } else {  /* bound K */
        int inf_mismatch = (isinf(g) || isinf(w)) && g != w;
        double from = center ? center[i] : w;
        ok = ulp_distance(o->dtype, gb, wb) <= (double)o->param || fabs(g - from) <= bound[i];
        int flushed = o->flush && w != 0 && fabs(w) < float_tiny(o->dtype) && g == 0 && !signbit(g) == !signbit(w);
        ok = (ok || flushed) && !inf_mismatch;
      }
    }
    if (!ok && bad++ == 0) first = i;
  }
  if (!bad && o->stats && center && magnitude) return dot_product_statistics(o, got, center, magnitude, n, why);
  if (!bad) return 0;
  char g[64], w[64], b[64] = "";
  describe(g, sizeof g, o->dtype, load_bits(got + first * o->item, o->item), o->item);
  describe(w, sizeof w, o->dtype, load_bits(want + first * o->item, o->item), o->item);
  if (o->check == CHECK_BOUND) snprintf(b, sizeof b, ", allowed abs error there %.6g", bound[first]);
  static const char *names[] = {"-", "bitwise", "exact", "lsb", "bound"};
  snprintf(why, LINE, "output %s (%s, check %s %llu): %zu of %zu elements differ; first at index %zu: got %s, "
           "expected %s%s", o->name, o->dtype, names[o->check], o->param, bad, n, first, g, w, b);
  return 1;
}

/* -- one case ------------------------------------------------------------------------------------------------ */
static void fail(struct state *s, const char *fmt, const char *detail) {
  if (s->bad) return;  /* the first failure of a case is the one reported */
  s->bad = 1;
  snprintf(s->why, LINE, fmt, detail);
}

static int prepare(struct state *s) {
  if (s->prepared) return s->e != NULL && s->e->run != NULL && !s->bad;
  s->prepared = 1;
  if (!s->e || !s->e->run) return 0;
  const struct golden_entry *e = s->e;
  if (e->n_in != s->n_in || e->n_out != s->n_out) {
    fail(s, "%s", "golden.txt and entries.c disagree on the io");
    return 0;
  }
  s->c = alloc_aligned(e->constant_size, e->align, &s->rc_);
  s->m = alloc_aligned(e->mutable_size, e->align, &s->rm_);
  s->a = alloc_aligned(e->activations_size, e->align, &s->ra_);
  if (!s->c || !s->m || !s->a) { fail(s, "%s", "out of memory"); return 0; }
  char why[LINE];
  if (strcmp(s->weights, "-") != 0 && read_exact(s, s->weights, s->c, e->constant_size, why)) {
    fail(s, "weights: %s", why);
    return 0;
  }
  return 1;
}

static void clear_files(struct state *s) {
  for (int k = 0; k < s->n_out; ++k)
    s->out[k].file[0] = s->out[k].bound[0] = s->out[k].center[0] = s->out[k].magnitude[0] = 0;
}

static void run_set(struct state *s) {
  s->sets++;
  if (!prepare(s)) return;
  const struct golden_entry *e = s->e;
  char why[LINE];
  memset(s->m, 0xFF, e->mutable_size);
  memset(s->a, 0xFF, e->activations_size);
  for (int i = 0; i < s->n_in; ++i) {
    if (s->in[i].size != e->in_size[i]) { fail(s, "%s", "an input's size differs from the bundle header's"); return; }
    if (read_exact(s, s->in[i].file, s->m + e->in_off[i], e->in_size[i], why)) { fail(s, "input: %s", why); return; }
  }
  int rc = e->run(s->c, s->m, s->a);
  if (rc) {
    snprintf(why, sizeof why, "%d (instruction %d, error kind %d)", rc, rc / 8, rc % 8);
    fail(s, "the entry point returned error code %s", why);
    return;
  }
  for (int k = 0; k < s->n_out; ++k) {
    struct io *o = &s->out[k];
    if (o->check == CHECK_NONE || !o->file[0]) continue;
    if (o->size != e->out_size[k]) { fail(s, "%s", "an output's size differs from the bundle header's"); return; }
    uint8_t *want = malloc(o->size ? o->size : 1);
    double *bound = NULL;
    int err = !want || read_exact(s, o->file, want, o->size, why);
    if (!err && o->check == CHECK_BOUND) {
      size_t nb = (o->size / o->item) * sizeof(double);
      bound = malloc(nb ? nb : 1);
      err = !bound || !o->bound[0] || read_exact(s, o->bound, (uint8_t *)bound, nb, why);
      if (err && !o->bound[0]) snprintf(why, sizeof why, "output %s has no bound file", o->name);
    }
    double *center = NULL, *magnitude = NULL;
    size_t nd = (o->size / (o->item ? o->item : 1)) * sizeof(double);
    if (!err && o->center[0]) {
      center = malloc(nd ? nd : 1);
      err = !center || read_exact(s, o->center, (uint8_t *)center, nd, why);
    }
    if (!err && o->magnitude[0]) {
      magnitude = malloc(nd ? nd : 1);
      err = !magnitude || read_exact(s, o->magnitude, (uint8_t *)magnitude, nd, why);
    }
    if (err) fail(s, "expected output: %s", why);
    else if (check_output(o, s->m + e->out_off[k], want, bound, center, magnitude, why)) {
      char set[LINE + 32];
      snprintf(set, sizeof set, "input set %d: %s", s->sets - 1, why);
      fail(s, "%s", set);
    }
    free(want);
    free(bound);
    free(center);
    free(magnitude);
  }
  clear_files(s);
}

static enum check parse_check(const char *t) {
  return !strcmp(t, "bitwise") ? CHECK_BITWISE : !strcmp(t, "exact") ? CHECK_EXACT : !strcmp(t, "lsb") ? CHECK_LSB
         : !strcmp(t, "bound") ? CHECK_BOUND : CHECK_NONE;
}

int main(int argc, char **argv) {
  const char *dir = NULL, *only = NULL;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "-v")) verbose = 1;
    else if (!strcmp(argv[i], "--case") && i + 1 < argc) only = argv[++i];
    else if (!dir && argv[i][0] != '-') dir = argv[i];
    else { dir = NULL; break; }
  }
  if (!dir) {
    fprintf(stderr, "usage: %s GOLDEN_DIR [-v] [--case TEXT]\n", argv[0]);
    return 2;
  }
  char path[LINE + 16], line[LINE];
  snprintf(path, sizeof path, "%s/golden.txt", dir);
  FILE *f = fopen(path, "r");
  if (!f) { fprintf(stderr, "cannot open %s\n", path); return 2; }
  if (!fgets(line, sizeof line, f) || strncmp(line, "glow-golden 1", 13) != 0) {
    fprintf(stderr, "%s: not a glow-golden 1 manifest\n", path);
    return 2;
  }
  static struct state s;
  int cases = 0, passed = 0, failed = 0, skipped = 0, sets = 0, in_case = 0, selected = 0, lineno = 1;
  while (fgets(line, sizeof line, f)) {
    lineno++;
    char kind[16] = "", a[LINE] = "", b[LINE] = "";
    if (sscanf(line, "%15s", kind) != 1) continue;
    if (!strcmp(kind, "case")) {
      memset(&s, 0, sizeof s);
      s.dir = dir;
      if (sscanf(line, "case %127s %4095s %4095s", s.entry, s.id, s.weights) != 3) goto bad_line;
      s.e = find_entry(s.entry);
      in_case = 1;
      selected = !only || strstr(s.id, only) != NULL;
    } else if (!in_case) {
      goto bad_line;
    } else if (!strcmp(kind, "in") || !strcmp(kind, "out")) {
      int is_in = kind[0] == 'i';
      struct io *o = is_in ? &s.in[s.n_in] : &s.out[s.n_out];
      if ((is_in ? s.n_in : s.n_out) >= MAX_IO) goto bad_line;
      memset(o, 0, sizeof *o);
      if (is_in) {
        if (sscanf(line, "in %1023s %31s %zu %zu", o->name, o->dtype, &o->size, &o->item) != 4) goto bad_line;
        s.n_in++;
      } else {
        if (sscanf(line, "out %1023s %31s %zu %zu %4095s %llu %d %llu %d", o->name, o->dtype, &o->size, &o->item, a,
                   &o->param, &o->flush, &o->n, &o->stats) != 9) goto bad_line;
        o->check = parse_check(a);
        s.n_out++;
      }
    } else if (!strcmp(kind, "set")) {
      clear_files(&s);
    } else if (!strcmp(kind, "file")) {
      int k;
      if (sscanf(line, "file %4095s %d %4095s", a, &k, b) != 3) goto bad_line;
      int n = !strcmp(a, "in") ? s.n_in : s.n_out;
      if (k < 0 || k >= n) goto bad_line;
      if (!strcmp(a, "in")) strcpy(s.in[k].file, b);
      else if (!strcmp(a, "out")) strcpy(s.out[k].file, b);
      else if (!strcmp(a, "bound")) strcpy(s.out[k].bound, b);
      else if (!strcmp(a, "center")) strcpy(s.out[k].center, b);
      else if (!strcmp(a, "magnitude")) strcpy(s.out[k].magnitude, b);
      else goto bad_line;
    } else if (!strcmp(kind, "run")) {
      if (selected) run_set(&s);
    } else if (!strcmp(kind, "end")) {
      in_case = 0;
      if (!selected) continue;
      cases++;
      if (!s.e || !s.e->run) {
        skipped++;
        printf("SKIP %s: entry %s is not in this build (%s)\n", s.id, s.entry,
               s.e ? "its bundle did not compile: see build_failures.txt" : "not in entries.c");
      } else if ((sets += s.sets, s.bad)) {
        failed++;
        printf("FAIL %s: %s\n", s.id, s.why);
      } else {
        passed++;
        if (verbose) printf("PASS %s (%d input sets)\n", s.id, s.sets);
      }
      free(s.rc_); free(s.rm_); free(s.ra_);
      s.rc_ = s.rm_ = s.ra_ = NULL;
    } else {
      goto bad_line;
    }
    continue;
  bad_line:
    fprintf(stderr, "%s:%d: malformed line: %s", path, lineno, line);
    return 2;
  }
  fclose(f);
  printf("golden replay: %d cases, %d input sets: %d passed, %d failed, %d skipped\n", cases, sets, passed, failed,
         skipped);
  return failed || skipped ? 1 : 0;  /* a case that did not run has not passed */
}
