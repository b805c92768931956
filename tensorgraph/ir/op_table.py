"""The op table: every op of the IR declared once, as data, and registered in `OPS`.

Each entry gives the op's name, arity (min and max inputs; max None is variadic), its
inference rule (`tensorgraph.ir.inference`), its attribute schema with defaults, its
category (for reports) and its flags (elementwise, commutative, boundary; pure unless
said otherwise). Families of ops that share a rule and a schema are declared by loops
over the tables below (FLOAT_UNARY, ARITHMETIC, ...). Importing `tensorgraph.ir.ops`
imports this module, so the registry is complete whenever it can be read.
"""

from __future__ import annotations

from tensorgraph.ir.index_inference import infer_gather, infer_slice_update, infer_take
from tensorgraph.ir.inference import (
    infer_arange,
    infer_arg_reduce,
    infer_argsort,
    infer_arith,
    infer_bitwise,
    infer_boundary,
    infer_broadcast_to,
    infer_cast,
    infer_compare,
    infer_concat,
    infer_float_binary,
    infer_full,
    infer_logical,
    infer_matmul,
    infer_matmul_transposed,
    infer_matmul_transposed_a,
    infer_minmax,
    infer_narrow,
    infer_predicate,
    infer_reduce,
    infer_reshape,
    infer_scan,
    infer_softmax,
    infer_sort,
    infer_transpose,
    infer_unary,
    infer_where,
)
from tensorgraph.ir.ops import AttrSpec, OpDef, register
from tensorgraph.ir.window_inference import (
    infer_adaptive_pool,
    infer_conv2d,
    infer_conv_transpose2d,
    infer_pad,
    infer_pool,
    infer_upsample,
)

# ---------------------------------------------------------------- boundary nodes

_BOUNDARY = {"name": AttrSpec("str"), "shape": AttrSpec("extents"), "dtype": AttrSpec("dtype")}
register(
    OpDef("input", 0, 0, infer_boundary, _BOUNDARY, category="boundary", pure=True, boundary=True)
)
register(OpDef("param", 0, 0, infer_boundary, _BOUNDARY, category="boundary", boundary=True))
# A state is read like an input; its bytes persist across calls (in the state region).
register(OpDef("state", 0, 0, infer_boundary, _BOUNDARY, category="boundary", boundary=True))
register(
    OpDef(
        "constant",
        0,
        0,
        infer_boundary,
        {**_BOUNDARY, "name": AttrSpec("str", ""), "value": AttrSpec("bytes")},
        category="boundary",
        boundary=True,
    )
)

# ---------------------------------------------------------------- elementwise

_ELEMENTWISE = {"category": "elementwise", "elementwise": True}
FLOAT_UNARY = ("exp", "log", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tanh", "sigmoid", "silu")
NUMERIC_UNARY = ("neg", "abs", "square", "relu")
for _name in FLOAT_UNARY + NUMERIC_UNARY:
    register(OpDef(_name, 1, 1, infer_unary(_name, _name in FLOAT_UNARY), {}, **_ELEMENTWISE))
# Float math added for imported models; the rounding ops and sign keep integer inputs
# unchanged (floor of an int is the int, as in torch).
FLOAT_MATH = ("erf", "log1p", "expm1", "tan", "atan")
ROUNDING = ("floor", "ceil", "round", "trunc", "sign")
for _name in FLOAT_MATH:
    register(OpDef(_name, 1, 1, infer_unary(_name, True), {}, **_ELEMENTWISE))
for _name in ROUNDING:
    register(OpDef(_name, 1, 1, infer_unary(_name, False), {}, **_ELEMENTWISE))
for _name in ("isnan", "isinf"):
    register(OpDef(_name, 1, 1, infer_predicate, {}, **_ELEMENTWISE))
register(OpDef("bitwise_not", 1, 1, infer_bitwise, {}, **_ELEMENTWISE))
_GELU = {"approximate": AttrSpec("str", "none")}
register(OpDef("gelu", 1, 1, infer_unary("gelu", True), _GELU, **_ELEMENTWISE))
register(OpDef("logical_not", 1, 1, infer_logical, {}, **_ELEMENTWISE))

# binary ops: name -> commutative
ARITHMETIC = {"add": True, "sub": False, "mul": True, "div": False, "pow": False}
for _name, _commutes in ARITHMETIC.items():
    register(OpDef(_name, 2, 2, infer_arith(_name), {}, **_ELEMENTWISE, commutative=_commutes))
for _name in ("maximum", "minimum"):
    register(OpDef(_name, 2, 2, infer_minmax, {}, **_ELEMENTWISE, commutative=True))
# Integer-division family: an integer divisor of zero is a RunError on every backend.
DIVISIONS = ("remainder", "fmod", "floor_divide")
for _name in DIVISIONS:
    register(OpDef(_name, 2, 2, infer_arith(_name), {}, **_ELEMENTWISE))
for _name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
    register(OpDef(_name, 2, 2, infer_bitwise, {}, **_ELEMENTWISE, commutative=True))
register(OpDef("atan2", 2, 2, infer_float_binary("atan2"), {}, **_ELEMENTWISE))
COMPARISONS = {"eq": True, "ne": True, "lt": False, "le": False, "gt": False, "ge": False}
for _name, _commutes in COMPARISONS.items():
    register(OpDef(_name, 2, 2, infer_compare, {}, **_ELEMENTWISE, commutative=_commutes))
for _name in ("logical_and", "logical_or", "logical_xor"):
    register(OpDef(_name, 2, 2, infer_logical, {}, **_ELEMENTWISE, commutative=True))
register(OpDef("where", 3, 3, infer_where, {}, **_ELEMENTWISE))

# ---------------------------------------------------------------- contractions and reductions

register(OpDef("matmul", 2, 2, infer_matmul, {}, category="matmul"))
# a @ swapaxes(b, -1, -2) without the transposed copy (passes/transposed_matmul.py)
register(OpDef("matmul_transposed", 2, 2, infer_matmul_transposed, {}, category="matmul"))
# swapaxes(a, -1, -2) @ b likewise (a weight gradient's x^T @ dy)
register(OpDef("matmul_transposed_a", 2, 2, infer_matmul_transposed_a, {}, category="matmul"))

_REDUCE = {"axes": AttrSpec("ints"), "keepdims": AttrSpec("bool", False)}
for _name in ("sum", "mean", "max", "min", "prod", "any", "all"):
    register(OpDef(_name, 1, 1, infer_reduce(_name), _REDUCE, category="reduction"))
_ARG_REDUCE = {"axis": AttrSpec("int"), "keepdims": AttrSpec("bool", False)}
for _name in ("argmax", "argmin"):
    register(OpDef(_name, 1, 1, infer_arg_reduce(_name), _ARG_REDUCE, category="reduction"))
_SCAN = {"axis": AttrSpec("int"), "dtype": AttrSpec("dtype")}
for _name in ("cumsum", "cumprod"):
    register(OpDef(_name, 1, 1, infer_scan, _SCAN, category="reduction"))
_SORT = {"axis": AttrSpec("int"), "descending": AttrSpec("bool", False)}
register(OpDef("sort", 1, 1, infer_sort, _SORT, category="reduction"))
register(OpDef("argsort", 1, 1, infer_argsort, _SORT, category="reduction"))
for _name in ("softmax", "log_softmax"):
    register(OpDef(_name, 1, 1, infer_softmax, {"axis": AttrSpec("int")}, category="reduction"))

# ---------------------------------------------------------------- layout, views, gathers

register(OpDef("transpose", 1, 1, infer_transpose, {"axes": AttrSpec("ints")}, category="layout"))
register(OpDef("reshape", 1, 1, infer_reshape, {"shape": AttrSpec("extents")}, category="view"))
register(OpDef("cast", 1, 1, infer_cast, {"dtype": AttrSpec("dtype")}, category="view"))
register(
    OpDef(
        "narrow",
        1,
        1,
        infer_narrow,
        {"axis": AttrSpec("int"), "start": AttrSpec("extent"), "length": AttrSpec("extent")},
        category="view",
    )
)
register(
    OpDef(
        "broadcast_to", 1, 1, infer_broadcast_to, {"shape": AttrSpec("extents")}, category="layout"
    )
)
register(OpDef("concat", 1, None, infer_concat, {"axis": AttrSpec("int")}, category="layout"))
register(OpDef("take", 2, 2, infer_take, {"axis": AttrSpec("int")}, category="gather"))
register(OpDef("gather", 2, 2, infer_gather, {"axis": AttrSpec("int")}, category="gather"))
register(
    OpDef(
        "slice_update",
        2,
        3,  # target, update[, start]: a run-time start is a third operand and attr start 0
        infer_slice_update,
        {"axis": AttrSpec("int"), "start": AttrSpec("extent", 0)},
        category="update",
    )
)

# ---------------------------------------------------------------- generators

register(
    OpDef(
        "arange",
        0,
        0,
        infer_arange,
        {
            "start": AttrSpec("bound"),
            "stop": AttrSpec("bound"),
            "step": AttrSpec("float", 1),
            "dtype": AttrSpec("dtype"),
        },
        category="generator",
    )
)
register(
    OpDef(
        "full",
        0,
        0,
        infer_full,
        {"shape": AttrSpec("extents"), "value": AttrSpec("scalar"), "dtype": AttrSpec("dtype")},
        category="generator",
    )
)

# ---------------------------------------------------------------- convolution and pooling

register(
    OpDef(
        "conv2d",
        2,
        2,
        infer_conv2d,
        {
            "stride": AttrSpec("ints", (1, 1)),
            "padding": AttrSpec("ints", (0, 0)),
            "dilation": AttrSpec("ints", (1, 1)),
            "groups": AttrSpec("int", 1),
            # the bottom and right padding where they differ from the top and left
            # (`conv_pads`); empty: the same on both sides, as torch pads
            "padding_end": AttrSpec("ints", ()),
        },
        category="conv",
    )
)

register(
    OpDef(
        "conv_transpose2d",
        2,
        2,
        infer_conv_transpose2d,
        {
            "stride": AttrSpec("ints", (1, 1)),
            "padding": AttrSpec("ints", (0, 0)),
            "output_padding": AttrSpec("ints", (0, 0)),
            "dilation": AttrSpec("ints", (1, 1)),
            "groups": AttrSpec("int", 1),
        },
        category="conv",
    )
)
# Attributes added after the first release have defaults, so older graphs and JSON load
# unchanged (divisor_override 0 means none: the schema has no optional ints).
_POOL = {
    "kernel_size": AttrSpec("ints"),
    "stride": AttrSpec("ints"),
    "padding": AttrSpec("ints", (0, 0)),
    "ceil_mode": AttrSpec("bool", False),
}
register(
    OpDef(
        "max_pool2d",
        1,
        1,
        infer_pool,
        {**_POOL, "dilation": AttrSpec("ints", (1, 1))},
        category="pool",
    )
)
register(
    OpDef(
        "avg_pool2d",
        1,
        1,
        infer_pool,
        {
            **_POOL,
            "count_include_pad": AttrSpec("bool", True),
            "divisor_override": AttrSpec("int", 0),
        },
        category="pool",
    )
)
for _name in ("adaptive_avg_pool2d", "adaptive_max_pool2d"):
    register(
        OpDef(_name, 1, 1, infer_adaptive_pool, {"output_size": AttrSpec("ints")}, category="pool")
    )
register(
    OpDef(
        "pad",
        1,
        1,
        infer_pad,
        {
            "pads": AttrSpec("extents"),
            "value": AttrSpec("scalar", 0.0),
            "mode": AttrSpec("str", "constant"),
        },
        category="layout",
    )
)
register(
    OpDef(
        "upsample_nearest2d",
        1,
        1,
        infer_upsample("upsample_nearest2d", False),
        {"output_size": AttrSpec("ints")},
        category="pool",
    )
)
register(
    OpDef(
        "upsample_bilinear2d",
        1,
        1,
        infer_upsample("upsample_bilinear2d", True),
        {"output_size": AttrSpec("ints"), "align_corners": AttrSpec("bool", False)},
        category="pool",
    )
)
from tensorgraph.ir import (  # noqa: E402, F401  (they register ops)
    conv_grad,
    experts,
    pool_grad,
    quantized,
    scatter,
    updates,
)
