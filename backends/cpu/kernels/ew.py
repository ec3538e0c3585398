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

UNARY = set(C_MATH) | {"neg", "abs", "sign", "reciprocal", "sigmoid", "isnan", "isinf", "not", "bitwise_not"}
BINARY = {"add", "sub", "mul", "div", "pow", "max", "min", "and", "or", "xor", "bitwise_and", "bitwise_or",
          "bitwise_xor", "shl", "shr", "eq", "lt", "le", "gt", "ge", "mod"}


def _fsfx(ct) -> str:
    return "f" if ct.compute == "float" else ""


def _dsfx(ct) -> str:
    return "f" if ct.compute == "float" else "d"


def unary(op, dt, a) -> str:
    """Expression in the compute type of ``dt`` (or a 0/1 int for predicates)."""
    ct = ctype(dt)
    c = ct.compute
    if op in ("exp", "erf") and c == "float":  # branch-free, so loops over them vectorize (glow_prelude.h)
        return f"glow_{op}f({a})"
    if op in C_MATH:
        return f"{C_MATH[op]}{_fsfx(ct)}({a})"
    if op == "neg":
        return f"({c})(-{a})" if ct.is_float or ct.signed else f"({c})(0u - {a})"
    if op == "abs":
        if ct.is_float:
            return f"fabs{_fsfx(ct)}({a})"
        return f"({c})({a} < 0 ? -{a} : {a})" if ct.signed else a
    if op == "sign":
        if ct.is_float:
            return f"glow_sign{_dsfx(ct)}({a})"
        return f"({c})(({a} > 0) - ({a} < 0))"
    if op == "reciprocal":
        return f"(({c})1 / {a})"
    if op == "sigmoid":
        return f"glow_sigmoid{_dsfx(ct)}({a})"
    if op == "isnan":
        return f"({a} != {a})"
    if op == "isinf":
        return f"(isinf({a}) != 0)"
    if op == "not":
        return f"(!{a})"
    if op == "bitwise_not":
        return f"({c})(~{a})"
    raise KeyError(op)


def binary(op, dt, a, b, attrs) -> tuple[str, list[str]]:
    """(expression, zero-checks on the raw operand b) for a binary primitive."""
    ct = ctype(dt)
    c = ct.compute
    if op in ("add", "sub", "mul"):
        sym = {"add": "+", "sub": "-", "mul": "*"}[op]
        if not ct.is_float and ct.bits < 64 and not ct.signed:
            return f"({c})((uint64_t){a} {sym} (uint64_t){b})", []
        return f"({c})({a} {sym} {b})", []
    if op == "div":
        if ct.is_float:
            return f"({a} / {b})", []
        fn = "glow_sdiv((int64_t)" if ct.signed else "glow_udiv((uint64_t)"
        cast = "(int64_t)" if ct.signed else "(uint64_t)"
        return f"({c}){fn}{a}, {cast}{b})", ["{b} == 0"]
    if op == "mod":
        fmod = attrs.get("fmod", 0)
        if ct.is_float:
            return (f"fmod{_fsfx(ct)}({a}, {b})" if fmod else f"glow_pymod{_dsfx(ct)}({a}, {b})"), []
        if not ct.signed:
            return f"({c})glow_urem((uint64_t){a}, (uint64_t){b})", ["{b} == 0"]
        fn = "glow_srem" if fmod else "glow_spymod"
        return f"({c}){fn}((int64_t){a}, (int64_t){b})", ["{b} == 0"]
    if op == "pow":
        if ct.is_float:
            return f"pow{_fsfx(ct)}({a}, {b})", []
        return f"({c})glow_ipow((int64_t){a}, (int64_t){b})", []
    if op in ("max", "min"):
        if ct.is_float:
            return f"glow_{op}{_dsfx(ct)}({a}, {b})", []
        return f"({a} {'>' if op == 'max' else '<'} {b} ? {a} : {b})", []
    if op == "and":
        return f"({a} && {b})", []
    if op == "or":
        return f"({a} || {b})", []
    if op == "xor":
        return f"(({a} != 0) ^ ({b} != 0))", []
    if op.startswith("bitwise_"):
        sym = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^"}[op]
        return f"({c})({a} {sym} {b})", []
    if op in ("shl", "shr"):
        sym = "<<" if op == "shl" else ">>"
        return f"(({b}) >= {ct.bits} ? ({c})0 : ({c})((uint64_t){a} {sym} {b}))", []
    if op in ("eq", "lt", "le", "gt", "ge"):
        sym = {"eq": "==", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}[op]
        return f"({a} {sym} {b})", []
    raise KeyError(op)


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
                     "gelu_tanh": ("cube", "scale")}


def activation(act, dt, v, params) -> str:
    """The fused activation ``act`` of the stored value ``v`` (a raw value of ``dt``'s storage type), built from
    the elementwise primitives' own expressions in the order the core lowers it (relu = max(v, 0), clip =
    min(max(v, min), max), silu = v * sigmoid(v), leaky_relu = select(v < 0, v * alpha, v), gelu_erf =
    (v * 0.5) * (erf(v * scale) + 1), gelu_erf_div = (v * (erf(v / divisor) + 1)) * 0.5, gelu_tanh = (v * 0.5) *
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
