"""The op registry: the single source of truth for every op.

Each `OpDef` states arity, attribute schema (with defaults), shape/dtype inference and
flags. Inference receives `Operand`s (a label for messages, shape, dtype) and the full
attribute dict, and raises ShapeError/DTypeError without the node prefix; the graph adds
`%id op:` when it re-raises. Attributes are stored canonically: axes non-negative and
sorted, shapes fully resolved, dtypes by name, so equal computations have equal nodes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

from attrs import field, frozen

from tensorgraph.errors import DTypeError, GraphError, ShapeError
from tensorgraph.ir.dtypes import DTYPES, DType, as_dtype, bool_, float32, int32, promote_types
from tensorgraph.ir.shapes import Shape, broadcast_shapes, numel

REQUIRED = object()


@frozen
class Operand:
    """What inference sees of an input: a label for messages (`x`, `%3`), shape, dtype."""

    label: str
    shape: Shape
    dtype: DType

    def __str__(self) -> str:
        return f"{self.label} {self.shape}"


@frozen
class AttrSpec:
    """One attribute: its kind (int, ints, float, scalar, bool, str, dtype, bytes) and default."""

    kind: str
    default: object = REQUIRED


Infer = Callable[[Sequence[Operand], Mapping[str, object]], tuple[Shape, DType]]


@frozen
class OpDef:
    """An op's contract. `max_inputs=None` means variadic. `category` groups ops in reports.

    Flags: `elementwise` (output element i depends only on input elements i after
    broadcasting: safe to write in place of a same-sized operand), `commutative` (inputs
    compare as a set), `pure` (no side effects: CSE and DCE may merge or drop it),
    `boundary` (input / param / constant). View-ness depends on attributes, so it is the
    function `view_offset` below rather than a flag."""

    name: str
    min_inputs: int
    max_inputs: int | None
    infer: Infer
    attrs: Mapping[str, AttrSpec] = field(factory=dict)
    category: str = "other"
    elementwise: bool = False
    commutative: bool = False
    pure: bool = True
    boundary: bool = False


OPS: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    if op.name in OPS:
        raise GraphError(f"op {op.name!r} registered twice")
    OPS[op.name] = op
    return op


def get_op(name: str) -> OpDef:
    """The OpDef named `name`; GraphError listing known ops otherwise."""
    try:
        return OPS[name]
    except KeyError:
        raise GraphError(f"unknown op {name!r}; known ops: {', '.join(sorted(OPS))}") from None


# ---------------------------------------------------------------- attribute checks

_KIND_CHECKS: dict[str, Callable[[object], bool]] = {
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "ints": lambda v: isinstance(v, tuple) and all(_KIND_CHECKS["int"](x) for x in v),
    "float": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "scalar": lambda v: isinstance(v, int | float | bool),
    "bool": lambda v: isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
    "dtype": lambda v: isinstance(v, str) and v in DTYPES,
    "bytes": lambda v: isinstance(v, bytes),
}


def complete_attrs(op: OpDef, attrs: Mapping[str, object], who: str) -> dict[str, object]:
    """`attrs` checked against the op's schema with defaults filled in (GraphError names
    `who`, the attribute and the expected kind)."""
    unknown = set(attrs) - set(op.attrs)
    if unknown:
        raise GraphError(f"{who}: unknown attribute(s) {sorted(unknown)} for op {op.name!r}")
    result = {}
    for name, spec in op.attrs.items():
        value = attrs.get(name, spec.default)
        if value is REQUIRED:
            raise GraphError(f"{who}: missing required attribute {name!r}")
        if isinstance(value, list):
            value = tuple(value)
        if not _KIND_CHECKS[spec.kind](value):
            raise GraphError(f"{who}: attribute {name!r} must be {spec.kind} but got {value!r}")
        result[name] = value
    return result


# ---------------------------------------------------------------- inference helpers


def _need_float(x: Operand, op: str) -> None:
    if not x.dtype.is_float:
        raise DTypeError(f"{op} needs a floating-point input but {x.label} is {x.dtype}")


def _need_numeric(x: Operand, op: str) -> None:
    if x.dtype == bool_:
        raise DTypeError(f"{op} needs a numeric input but {x.label} is bool")


def _infer_unary(op: str, float_only: bool) -> Infer:
    def infer(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
        (x,) = xs
        (_need_float if float_only else _need_numeric)(x, op)
        return x.shape, x.dtype

    return infer


def _broadcast(xs: Sequence[Operand]) -> Shape:
    return broadcast_shapes(*(x.shape for x in xs), labels=[x.label for x in xs])


def _infer_arith(op: str) -> Infer:
    def infer(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
        a, b = xs
        for x in xs:
            _need_numeric(x, op)
        dtype = promote_types(a.dtype, b.dtype)
        if op == "div" and not dtype.is_float:
            dtype = float32  # true division, as NumPy and MLX do
        return _broadcast(xs), dtype

    return infer


def _infer_minmax(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    return _broadcast(xs), promote_types(xs[0].dtype, xs[1].dtype)


def _infer_compare(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    return _broadcast(xs), bool_


def _infer_logical(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    for x in xs:
        if x.dtype != bool_:
            raise DTypeError(f"logical ops need bool inputs but {x.label} is {x.dtype}")
    return _broadcast(xs), bool_


def _infer_where(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    cond, a, b = xs
    if cond.dtype != bool_:
        raise DTypeError(f"where needs a bool condition but {cond.label} is {cond.dtype}")
    return _broadcast(xs), promote_types(a.dtype, b.dtype)


def _infer_matmul(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    a, b = xs
    for x in xs:
        _need_numeric(x, "matmul")
        if len(x.shape) == 0:
            raise ShapeError(f"matmul needs operands of rank >= 1 but {x.label} is a scalar")
    a_shape = (1, *a.shape) if len(a.shape) == 1 else a.shape
    b_shape = (*b.shape, 1) if len(b.shape) == 1 else b.shape
    if a_shape[-1] != b_shape[-2]:
        raise ShapeError(f"inner dims differ: {a.label} {a.shape} @ {b.label} {b.shape}")
    try:
        batch = broadcast_shapes(a_shape[:-2], b_shape[:-2])
    except ShapeError:
        raise ShapeError(
            f"batch dims do not broadcast: {a.label} {a.shape} @ {b.label} {b.shape}"
        ) from None
    shape = (*batch, a_shape[-2], b_shape[-1])
    if len(a.shape) == 1:
        shape = shape[:-2] + shape[-1:]
    if len(b.shape) == 1:
        shape = shape[:-1]
    return shape, promote_types(a.dtype, b.dtype)


def _check_axes(x: Operand, axes: tuple[int, ...]) -> None:
    rank = len(x.shape)
    if any(not 0 <= a < rank for a in axes) or list(axes) != sorted(set(axes)):
        raise ShapeError(
            f"axes {axes} must be sorted, unique and in [0, {rank}) for {x.label} {x.shape}"
        )


def _reduced_shape(x: Operand, axes: tuple[int, ...], keepdims: bool) -> Shape:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    return tuple(d for i, d in enumerate(x.shape) if i not in axes)


def _infer_reduce(op: str) -> Infer:
    def infer(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
        (x,) = xs
        axes = attrs["axes"]
        _check_axes(x, axes)
        if op in ("max", "min") and any(x.shape[a] == 0 for a in axes):
            raise ShapeError(f"{op} over a zero-size axis of {x.label} {x.shape} has no identity")
        dtype = x.dtype
        if op == "sum" and dtype == bool_:
            dtype = int32
        if op == "mean" and not dtype.is_float:
            dtype = float32
        return _reduced_shape(x, axes, attrs["keepdims"]), dtype

    return infer


def _infer_argmax(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    (x,) = xs
    axis = attrs["axis"]
    _check_axes(x, (axis,))
    if x.shape[axis] == 0:
        raise ShapeError(f"argmax over the zero-size axis {axis} of {x.label} {x.shape}")
    return _reduced_shape(x, (axis,), attrs["keepdims"]), int32


def _infer_softmax(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    (x,) = xs
    _need_float(x, "softmax")
    _check_axes(x, (attrs["axis"],))
    return x.shape, x.dtype


def _infer_transpose(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    (x,) = xs
    axes = attrs["axes"]
    if sorted(axes) != list(range(len(x.shape))):
        raise ShapeError(f"axes {axes} are not a permutation of {x.label}'s {len(x.shape)} dims")
    return tuple(x.shape[a] for a in axes), x.dtype


def _infer_reshape(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    (x,) = xs
    shape = attrs["shape"]
    if any(d < 0 for d in shape) or numel(shape) != numel(x.shape):
        raise ShapeError(f"cannot reshape {x.label} {x.shape} to {shape}")
    return shape, x.dtype


def _infer_cast(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    return xs[0].shape, as_dtype(attrs["dtype"])


def _infer_narrow(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    (x,) = xs
    axis, start, length = attrs["axis"], attrs["start"], attrs["length"]
    _check_axes(x, (axis,))
    if start < 0 or length < 0 or start + length > x.shape[axis]:
        raise ShapeError(
            f"narrow [{start}, {start + length}) is outside axis {axis} of {x.label} {x.shape}"
        )
    return tuple(length if i == axis else d for i, d in enumerate(x.shape)), x.dtype


def _infer_concat(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    first = xs[0]
    axis = attrs["axis"]
    _check_axes(first, (axis,))
    for x in xs[1:]:
        same = len(x.shape) == len(first.shape) and all(
            d == e for i, (d, e) in enumerate(zip(x.shape, first.shape, strict=True)) if i != axis
        )
        if not same:
            raise ShapeError(f"concatenate along axis {axis}: {first} and {x} differ off-axis")
        if x.dtype != first.dtype:
            raise DTypeError(f"concatenate: {first.label} is {first.dtype}, {x.label} {x.dtype}")
    total = sum(x.shape[axis] for x in xs)
    return tuple(total if i == axis else d for i, d in enumerate(first.shape)), first.dtype


def _infer_take(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    x, indices = xs
    axis = attrs["axis"]
    _check_axes(x, (axis,))
    if not indices.dtype.is_integer:
        raise DTypeError(f"take needs integer indices but {indices.label} is {indices.dtype}")
    return (*x.shape[:axis], *indices.shape, *x.shape[axis + 1 :]), x.dtype


def _infer_slice_update(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    target, update = xs
    axis, start = attrs["axis"], attrs["start"]
    _check_axes(target, (axis,))
    fits = len(update.shape) == len(target.shape) and all(
        u == t for i, (u, t) in enumerate(zip(update.shape, target.shape, strict=True)) if i != axis
    )
    if not fits or start < 0 or start + update.shape[axis] > target.shape[axis]:
        raise ShapeError(
            f"slice_update: {update} does not fit {target} at axis {axis} start {start}"
        )
    if update.dtype != target.dtype:
        raise DTypeError(f"slice_update: {update.label} is {update.dtype}, target {target.dtype}")
    return target.shape, target.dtype


def _infer_arange(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    start, stop, step = attrs["start"], attrs["stop"], attrs["step"]
    if step == 0:
        raise ShapeError("arange step must be non-zero")
    return (max(0, math.ceil((stop - start) / step)),), as_dtype(attrs["dtype"])


def _infer_full(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    if any(d < 0 for d in attrs["shape"]):
        raise ShapeError(f"full: negative dim in {attrs['shape']}")
    return attrs["shape"], as_dtype(attrs["dtype"])


def _infer_broadcast_to(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    (x,) = xs
    shape = attrs["shape"]
    if broadcast_shapes(x.shape, shape, labels=[x.label, "target"]) != shape:
        raise ShapeError(f"cannot broadcast {x.label} {x.shape} to {shape}")
    return shape, x.dtype


def _pair(attrs: Mapping, name: str) -> tuple[int, int]:
    value = attrs[name]
    if len(value) != 2:
        raise ShapeError(f"{name} must have 2 entries (H, W) but got {value}")
    return value


def _window_out(size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    return (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1


def _infer_conv2d(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    x, w = xs
    if len(x.shape) != 4 or len(w.shape) != 4:
        raise ShapeError(f"conv2d needs NCHW input and OIHW weight: {x}, {w}")
    stride, padding, dilation = (_pair(attrs, n) for n in ("stride", "padding", "dilation"))
    groups = attrs["groups"]
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if groups < 1 or c % groups or o % groups or cg * groups != c:
        raise ShapeError(f"conv2d: {x} channels do not match weight {w} with groups={groups}")
    if min(stride) < 1 or min(dilation) < 1 or min(padding) < 0:
        raise ShapeError(f"conv2d: bad stride {stride} / dilation {dilation} / padding {padding}")
    oh = _window_out(h, kh, stride[0], padding[0], dilation[0])
    ow = _window_out(wd, kw, stride[1], padding[1], dilation[1])
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"conv2d: kernel {w.shape[2:]} larger than padded input {x}")
    return (n, o, oh, ow), promote_types(x.dtype, w.dtype)


def _infer_pool(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    (x,) = xs
    if len(x.shape) != 4:
        raise ShapeError(f"pooling needs an NCHW input but got {x}")
    kernel, stride, padding = (_pair(attrs, n) for n in ("kernel_size", "stride", "padding"))
    if min(kernel) < 1 or min(stride) < 1 or min(padding) < 0:
        raise ShapeError(f"pool: bad kernel {kernel} / stride {stride} / padding {padding}")
    if padding[0] * 2 > kernel[0] or padding[1] * 2 > kernel[1]:
        raise ShapeError(f"pool: padding {padding} exceeds half the kernel {kernel}")
    oh = _window_out(x.shape[2], kernel[0], stride[0], padding[0], 1)
    ow = _window_out(x.shape[3], kernel[1], stride[1], padding[1], 1)
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"pool: kernel {kernel} larger than padded input {x}")
    return (*x.shape[:2], oh, ow), x.dtype


def _infer_boundary(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    if any(d < 0 for d in attrs["shape"]):
        raise ShapeError(f"negative dim in {attrs['shape']}")
    dtype = as_dtype(attrs["dtype"])
    if "value" in attrs and len(attrs["value"]) != numel(attrs["shape"]) * dtype.itemsize:
        raise ShapeError(f"constant payload of {len(attrs['value'])} bytes for {attrs['shape']}")
    return attrs["shape"], dtype


# ---------------------------------------------------------------- the registry

_BOUNDARY = {"name": AttrSpec("str"), "shape": AttrSpec("ints"), "dtype": AttrSpec("dtype")}
register(OpDef("input", 0, 0, _infer_boundary, _BOUNDARY, "boundary", pure=True, boundary=True))
register(OpDef("param", 0, 0, _infer_boundary, _BOUNDARY, "boundary", boundary=True))
register(
    OpDef(
        "constant",
        0,
        0,
        _infer_boundary,
        {**_BOUNDARY, "name": AttrSpec("str", ""), "value": AttrSpec("bytes")},
        "boundary",
        boundary=True,
    )
)

FLOAT_UNARY = ("exp", "log", "sqrt", "rsqrt", "reciprocal", "sin", "cos", "tanh", "sigmoid", "silu")
NUMERIC_UNARY = ("neg", "abs", "square", "relu")
for _name in FLOAT_UNARY + NUMERIC_UNARY:
    register(OpDef(_name, 1, 1, _infer_unary(_name, _name in FLOAT_UNARY), {}, "elementwise", True))
register(
    OpDef(
        "gelu",
        1,
        1,
        _infer_unary("gelu", True),
        {"approximate": AttrSpec("str", "none")},
        "elementwise",
        True,
    )
)
register(OpDef("logical_not", 1, 1, _infer_logical, {}, "elementwise", True))

ARITHMETIC = {"add": True, "sub": False, "mul": True, "div": False, "pow": False}
for _name, _commutes in ARITHMETIC.items():
    register(OpDef(_name, 2, 2, _infer_arith(_name), {}, "elementwise", True, _commutes))
for _name in ("maximum", "minimum"):
    register(OpDef(_name, 2, 2, _infer_minmax, {}, "elementwise", True, True))
COMPARISONS = {"eq": True, "ne": True, "lt": False, "le": False, "gt": False, "ge": False}
for _name, _commutes in COMPARISONS.items():
    register(OpDef(_name, 2, 2, _infer_compare, {}, "elementwise", True, _commutes))
for _name in ("logical_and", "logical_or"):
    register(OpDef(_name, 2, 2, _infer_logical, {}, "elementwise", True, True))
register(OpDef("where", 3, 3, _infer_where, {}, "elementwise", True))

register(OpDef("matmul", 2, 2, _infer_matmul, {}, "matmul"))

_REDUCE = {"axes": AttrSpec("ints"), "keepdims": AttrSpec("bool", False)}
for _name in ("sum", "mean", "max", "min"):
    register(OpDef(_name, 1, 1, _infer_reduce(_name), _REDUCE, "reduction"))
register(
    OpDef(
        "argmax",
        1,
        1,
        _infer_argmax,
        {"axis": AttrSpec("int"), "keepdims": AttrSpec("bool", False)},
        "reduction",
    )
)
for _name in ("softmax", "log_softmax"):
    register(OpDef(_name, 1, 1, _infer_softmax, {"axis": AttrSpec("int")}, "reduction"))

register(OpDef("transpose", 1, 1, _infer_transpose, {"axes": AttrSpec("ints")}, "layout"))
register(OpDef("reshape", 1, 1, _infer_reshape, {"shape": AttrSpec("ints")}, "view"))
register(OpDef("cast", 1, 1, _infer_cast, {"dtype": AttrSpec("dtype")}, "view"))
register(
    OpDef(
        "narrow",
        1,
        1,
        _infer_narrow,
        {"axis": AttrSpec("int"), "start": AttrSpec("int"), "length": AttrSpec("int")},
        "view",
    )
)
register(OpDef("broadcast_to", 1, 1, _infer_broadcast_to, {"shape": AttrSpec("ints")}, "layout"))
register(OpDef("concat", 1, None, _infer_concat, {"axis": AttrSpec("int")}, "layout"))
register(OpDef("take", 2, 2, _infer_take, {"axis": AttrSpec("int")}, "gather"))
register(
    OpDef(
        "slice_update",
        2,
        2,
        _infer_slice_update,
        {"axis": AttrSpec("int"), "start": AttrSpec("int")},
        "update",
    )
)
register(
    OpDef(
        "arange",
        0,
        0,
        _infer_arange,
        {
            "start": AttrSpec("float"),
            "stop": AttrSpec("float"),
            "step": AttrSpec("float", 1),
            "dtype": AttrSpec("dtype"),
        },
        "generator",
    )
)
register(
    OpDef(
        "full",
        0,
        0,
        _infer_full,
        {"shape": AttrSpec("ints"), "value": AttrSpec("scalar"), "dtype": AttrSpec("dtype")},
        "generator",
    )
)
register(
    OpDef(
        "conv2d",
        2,
        2,
        _infer_conv2d,
        {
            "stride": AttrSpec("ints", (1, 1)),
            "padding": AttrSpec("ints", (0, 0)),
            "dilation": AttrSpec("ints", (1, 1)),
            "groups": AttrSpec("int", 1),
        },
        "conv",
    )
)
_POOL = {
    "kernel_size": AttrSpec("ints"),
    "stride": AttrSpec("ints"),
    "padding": AttrSpec("ints", (0, 0)),
}
register(OpDef("max_pool2d", 1, 1, _infer_pool, _POOL, "pool"))
register(
    OpDef(
        "avg_pool2d",
        1,
        1,
        _infer_pool,
        {**_POOL, "count_include_pad": AttrSpec("bool", True)},
        "pool",
    )
)


def view_offset(
    op: str, attrs: Mapping[str, object], source_shape: Shape, dtype: DType, source_dtype: DType
) -> int | None:
    """Byte offset into its input's storage when this op is a pure view, else None.

    Views: `reshape` (storage is contiguous, so always), `cast` to the same dtype, and
    `narrow` along axis 0 (start * inner elements * itemsize). Nothing else."""
    if op == "reshape":
        return 0
    if op == "cast":
        return 0 if dtype == source_dtype else None
    if op == "narrow" and attrs["axis"] == 0:
        return attrs["start"] * numel(source_shape[1:]) * dtype.itemsize
    return None
