"""C expressions of the elementwise primitives, casts and reduction updates, per dtype.

Each expression is computed in the dtype's compute type (float for float16/bfloat16, as the interpreter does)
and rounded once by the output's store conversion. Special values follow numpy: NaN-propagating max/min,
round half to even, integer division truncating toward zero, shifts of the bit width or more give 0.
"""
from __future__ import annotations

from .ctypes_map import INT_LIMITS, ctype

#: Float primitives computed by one C math function (its double name; float compute adds the f suffix).
C_MATH = {"exp": "exp", "log": "log", "sqrt": "sqrt", "sin": "sin", "cos": "cos", "tan": "tan", "asin": "asin",
          "acos": "acos", "atan": "atan", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh", "asinh": "asinh",
          "acosh": "acosh", "atanh": "atanh", "erf": "erf", "floor": "floor", "ceil": "ceil", "round": "nearbyint"}



def _fsfx(ct) -> str:
    return "f" if ct.compute == "float" else ""


def _dsfx(ct) -> str:
    return "f" if ct.compute == "float" else "d"


def _neg(ct, a):
    return f"({ct.compute})(-{a})" if ct.is_float or ct.signed else f"({ct.compute})(0u - {a})"


def _abs(ct, a):
    if ct.is_float:
        return f"fabs{_fsfx(ct)}({a})"
    return f"({ct.compute})({a} < 0 ? -{a} : {a})" if ct.signed else a


def _sign(ct, a):
    return f"glow_sign{_dsfx(ct)}({a})" if ct.is_float else f"({ct.compute})(({a} > 0) - ({a} < 0))"


#: C_MATH ops whose argument passes GLOW_ROUNDED's empty asm: GCC 12 with -fno-math-errno folds sin(atan(x)) and
#: cos(atan(x)) into x / sqrt(x * x + 1) and 1 / sqrt(x * x + 1) behind a copysign branch that makes NaN 1 and 0
#: (glowc fuzz, seed 20261204, g3420: an elementwise chain Atan -> Sin of NaN gave 1).
OPAQUE_ARGUMENT = ("sin", "cos")


def libm(op):
    """The C of a C_MATH primitive: its libm function (the float compute type adds the f suffix)."""
    if op in OPAQUE_ARGUMENT:
        return lambda ct, a: f"{C_MATH[op]}{_fsfx(ct)}(GLOW_ROUNDED(({ct.compute})({a})))"
    return lambda ct, a: f"{C_MATH[op]}{_fsfx(ct)}({a})"


#: Unary primitive -> C of ``f(ctype, a)``: an expression in the compute type (0/1 for predicates). Float exp,
#: erf and tanh are the prelude's branch-free polynomials (loops over them vectorize); the other C_MATH ops call
#: libm.
UNARY_C = {
    **{op: libm(op) for op in C_MATH},
    "neg": _neg, "abs": _abs, "sign": _sign,
    "reciprocal": lambda ct, a: f"(({ct.compute})1 / {a})",
    "sigmoid": lambda ct, a: f"glow_sigmoid{_dsfx(ct)}({a})",
    "isnan": lambda ct, a: f"({a} != {a})",
    "isinf": lambda ct, a: f"(isinf({a}) != 0)",
    "not": lambda ct, a: f"(!{a})",
    "bitwise_not": lambda ct, a: f"({ct.compute})(~{a})",
}
for _op in ("exp", "erf", "tanh"):
    UNARY_C[_op] = (lambda op, libm: lambda ct, a: f"glow_{op}f({a})" if ct.compute == "float" else libm(ct, a))(
        _op, UNARY_C[_op])


def unary(op, dt, a) -> str:
    """Expression in the compute type of ``dt`` (or a 0/1 int for predicates)."""
    return UNARY_C[op](ctype(dt), a)


def _arith(sym):
    def expr(ct, a, b, attrs):
        if not ct.is_float and ct.bits < 64 and not ct.signed:
            return f"({ct.compute})((uint64_t){a} {sym} (uint64_t){b})", []
        return f"({ct.compute})({a} {sym} {b})", []
    return expr


def _div(ct, a, b, attrs):
    if ct.is_float:
        return f"({a} / {b})", []
    fn = "glow_sdiv((int64_t)" if ct.signed else "glow_udiv((uint64_t)"
    cast = "(int64_t)" if ct.signed else "(uint64_t)"
    return f"({ct.compute}){fn}{a}, {cast}{b})", ["{b} == 0"]


def _mod(ct, a, b, attrs):
    fmod = attrs.get("fmod", 0)
    if ct.is_float:
        return (f"fmod{_fsfx(ct)}({a}, {b})" if fmod else f"glow_pymod{_dsfx(ct)}({a}, {b})"), []
    if not ct.signed:
        return f"({ct.compute})glow_urem((uint64_t){a}, (uint64_t){b})", ["{b} == 0"]
    fn = "glow_srem" if fmod else "glow_spymod"
    return f"({ct.compute}){fn}((int64_t){a}, (int64_t){b})", ["{b} == 0"]


def _pow(ct, a, b, attrs):
    if ct.is_float:
        return f"pow{_fsfx(ct)}({a}, {b})", []
    return f"({ct.compute})glow_ipow((int64_t){a}, (int64_t){b})", []


def _extreme(op):
    def expr(ct, a, b, attrs):
        if ct.is_float:
            return f"glow_{op}{_dsfx(ct)}({a}, {b})", []
        return f"({a} {'>' if op == 'max' else '<'} {b} ? {a} : {b})", []
    return expr


def _plain(fmt, typed=False):
    return lambda ct, a, b, attrs: ((f"({ct.compute})" if typed else "") + fmt.format(a=a, b=b), [])


def _shift(sym):
    return lambda ct, a, b, attrs: (f"(({b}) >= {ct.bits} ? ({ct.compute})0 : ({ct.compute})((uint64_t){a} {sym} {b}))",
                                    [])


#: Binary primitive -> C of ``f(ctype, a, b, attrs)``: (expression in the compute type, zero-checks on the raw
#: operand b, with ``{b}`` for it). Integers wrap as numpy's do; division and remainder by 0 never trap.
BINARY_C = {
    "add": _arith("+"), "sub": _arith("-"), "mul": _arith("*"), "div": _div, "mod": _mod, "pow": _pow,
    "max": _extreme("max"), "min": _extreme("min"),
    "and": _plain("({a} && {b})"), "or": _plain("({a} || {b})"), "xor": _plain("(({a} != 0) ^ ({b} != 0))"),
    "bitwise_and": _plain("({a} & {b})", True), "bitwise_or": _plain("({a} | {b})", True),
    "bitwise_xor": _plain("({a} ^ {b})", True), "shl": _shift("<<"), "shr": _shift(">>"),
    "eq": _plain("({a} == {b})"), "lt": _plain("({a} < {b})"), "le": _plain("({a} <= {b})"),
    "gt": _plain("({a} > {b})"), "ge": _plain("({a} >= {b})"),
}


def binary(op, dt, a, b, attrs) -> tuple[str, list[str]]:
    """(expression, zero-checks on the raw operand b) for a binary primitive."""
    return BINARY_C[op](ctype(dt), a, b, attrs)


#: The elementwise primitives of the tables (views: an entry added to a table is in them).
UNARY = UNARY_C.keys()
BINARY = BINARY_C.keys()


def cast(src, dst, a) -> str:
    """``a`` (a raw value of ``src``'s storage type) converted to ``dst``'s storage type as kernels.cast does."""
    s, d = ctype(src), ctype(dst)
    if src == dst:
        return a
    if dst == "bool":
        return f"(uint8_t)({s.ld(a)} != 0)"
    x = s.ld(a)
    if not d.is_float:  # to an integer type
        if not s.is_float:
            return f"({d.storage})({x})"
        if dst == "uint64":
            return f"glow_f2u64((double)({x}))"
        return f"({d.storage})glow_f2i_wrap((double)({x}))"
    # to a float type
    if dst == "bfloat16":
        return f"glow_f32_to_bf16((float)({x}))"
    return f"({d.storage})({x})"


def expression(op, in_dts, out_dt, names, attrs) -> tuple[str, list[str]]:
    """The store expression of an elementwise instruction over raw operand references ``names``."""
    dt = in_dts[0]
    if op == "cast":
        return cast(dt, out_dt, names[0]), []
    if op == "select":
        return f"({names[0]} ? {names[1]} : {names[2]})", []
    ct = ctype(dt)
    loads = [ct.ld(n) for n in names]
    oct_ = ctype(out_dt)
    if op in UNARY:
        expr, checks = unary(op, dt, loads[0]), []
    else:
        expr, checks = binary(op, dt, loads[0], loads[1], attrs)
        checks = [c.format(b=names[1]) for c in checks]
    if out_dt == "bool":
        return f"(uint8_t)({expr} != 0)", checks
    return oct_.st(expr), checks


def combine(reduction, dt, a, b) -> str:
    """scatter_nd's combination of the current value ``a`` with the update ``b`` (compute type)."""
    if reduction == "none":
        return b
    if reduction in ("add", "mul"):
        return binary(reduction, dt, a, b, {})[0]
    if reduction in ("max", "min"):
        return binary(reduction, dt, a, b, {})[0]
    raise KeyError(reduction)


def reduce_parts(op, dt) -> tuple[str, str, str]:
    """(accumulator C type, initial value, update statement with ``acc`` and ``v``) for a reduction."""
    ct = ctype(dt)
    if op in ("reduce_sum", "reduce_prod"):
        # Floats accumulate in double; integers in uint64 (wrap-around, then truncated to the type, as numpy).
        acc = "double" if ct.is_float else "uint64_t"
        return acc, ("0" if op == "reduce_sum" else "1"), ("acc += v" if op == "reduce_sum" else "acc *= v")
    hi = op == "reduce_min"
    if ct.is_float:
        acc = ct.compute
        init = "INFINITY" if hi else "(-INFINITY)"
        cmp = "<" if hi else ">"
        return acc, init, f"if (v {cmp} acc || v != v) acc = v"
    acc = ct.storage
    lo_v, hi_v = INT_LIMITS[dt]
    cmp = "<" if hi else ">"
    return acc, (hi_v if hi else lo_v), f"if (v {cmp} acc) acc = v"


#: Fused activations (glow_core.fusion) the kernels apply in their epilogue, with their parameters in order.
ACTIVATION_PARAMS = {"relu": (), "clip": ("min", "max"), "silu": (), "sigmoid": (), "tanh": (),
                     "leaky_relu": ("alpha",), "gelu_erf": ("scale",), "gelu_erf_div": ("divisor",),
                     "gelu_erf_half": ("divisor",),
                     "gelu_tanh": ("cube", "scale")}


def activation(act, dt, v, params) -> str:
    """The fused activation ``act`` of the stored value ``v`` (a raw value of ``dt``'s storage type), built from
    the elementwise primitives' own expressions in the order the core lowers it (relu = max(v, 0), clip =
    min(max(v, min), max), silu = v * sigmoid(v), leaky_relu = select(v < 0, v * alpha, v), gelu_erf =
    (v * 0.5) * (erf(v * scale) + 1), gelu_erf_div = (v * (erf(v / divisor) + 1)) * 0.5, gelu_erf_half = v *
    (0.5 * (erf(v / divisor) + 1)), gelu_tanh = (v * 0.5) *
    (tanh((v + ((v * v) * v) * cube) * scale) + 1)),
    each step rounded to the storage type as the primitive's store does, so a fused result equals the unfused one
    bit for bit (up to the C compiler's contraction of a product and a sum into one multiply-add, as gelu_tanh's
    x + x^3 * cube). ``params`` maps the activation's parameters to C expressions of the storage type."""
    def ew(op, names, out_dt=dt):
        return expression(op, [dt] * len(names), out_dt, names, {})[0]
    if act == "relu":
        return ew("max", [v, _zero(dt)])
    if act == "clip":
        return ew("min", [ew("max", [v, params["min"]]), params["max"]])
    if act in ("sigmoid", "tanh"):
        return ew(act, [v])
    if act == "silu":
        return ew("mul", [v, ew("sigmoid", [v])])
    if act == "leaky_relu":
        return f"({ew('lt', [v, _zero(dt)], 'bool')} ? {ew('mul', [v, params['alpha']])} : {v})"
    if act in ("hard_sigmoid", "hard_swish"):  # the product rounded before the add, as the separate mul stores it
        t = ew("mul", [v, params["alpha"]])
        t = f"GLOW_ROUNDED({t})" if ctype(dt).storage in ("float", "double") else t
        h = ew("min", [ew("max", [ew("add", [t, params["beta"]]), _zero(dt)]), _one(dt)])
        return h if act == "hard_sigmoid" else ew("mul", [v, h])
    if act.startswith("gelu"):
        half, one = ctype(dt).st("0.5f"), ctype(dt).st("1.0f")
        if act == "gelu_erf_div":
            return ew("mul", [ew("mul", [v, ew("add", [ew("erf", [ew("div", [v, params["divisor"]])]), one])]), half])
        if act == "gelu_erf_half":
            return ew("mul", [v, ew("mul", [half, ew("add", [ew("erf", [ew("div", [v, params["divisor"]])]), one])])])
        if act == "gelu_erf":
            t = ew("erf", [ew("mul", [v, params["scale"]])])
        else:
            cube = ew("mul", [ew("mul", [ew("mul", [v, v]), v]), params["cube"]])
            t = ew("tanh", [ew("mul", [ew("add", [v, cube]), params["scale"]])])
        return ew("mul", [ew("mul", [v, half]), ew("add", [t, one])])
    raise KeyError(act)


def _one(dt) -> str:
    return f"(({ctype(dt).storage})1)"


def _zero(dt) -> str:
    return f"(({ctype(dt).storage})0)"
