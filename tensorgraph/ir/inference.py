"""Shape and dtype inference rules, one per op family (the `infer` of each `OpDef`).

A rule takes the operands (`Operand`: label, shape, dtype) and the op's complete,
canonical attributes (axes non-negative and sorted, shapes resolved, dtypes by name) and
returns the output's (shape, dtype), or raises ShapeError/DTypeError naming the operand
label and the values involved, without the node prefix: the graph adds `%id op:` when it
re-raises. Rules are pure functions of their arguments. `infer_unary`, `infer_arith` and
`infer_reduce` are factories: they return the rule for the op they are given. The
indexing ops' rules are in index_inference.py, the windowed ops' in window_inference.py.

Shapes may hold `tg.Dim` extents (`ir.dims`). A condition on extents is decided by
`always`: it must hold for every value of the dims; one that holds for some values only
raises `undecided` (a GraphError naming the condition and the ranges), one that holds
for none raises the rule's ShapeError. Ints take the same comparisons, so a static shape
meets exactly the rules it always met.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import sympy
from attrs import evolve

from tensorgraph.errors import DTypeError, ShapeError
from tensorgraph.ir.dims import always, canonical, is_static, require, undecided
from tensorgraph.ir.dtypes import DType, as_dtype, bool_, float32, int32, promote_types
from tensorgraph.ir.shapes import Shape, broadcast_shapes, numel

if TYPE_CHECKING:
    # Annotations only: the registry core imports the table, which imports these rules.
    from tensorgraph.ir.ops import Infer, Operand


def _need_float(x: Operand, op: str) -> None:
    if not x.dtype.is_float:
        raise DTypeError(f"{op} needs a floating-point input but {x.label} is {x.dtype}")


def _need_numeric(x: Operand, op: str) -> None:
    if x.dtype == bool_:
        raise DTypeError(f"{op} needs a numeric input but {x.label} is bool")


def infer_unary(op: str, float_only: bool) -> Infer:
    def infer(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
        (x,) = xs
        (_need_float if float_only else _need_numeric)(x, op)
        return x.shape, x.dtype

    return infer


def _broadcast(xs: Sequence[Operand]) -> Shape:
    return broadcast_shapes(*(x.shape for x in xs), labels=[x.label for x in xs])


def infer_arith(op: str) -> Infer:
    def infer(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
        a, b = xs
        for x in xs:
            _need_numeric(x, op)
        dtype = promote_types(a.dtype, b.dtype)
        if op == "div" and not dtype.is_float:
            dtype = float32  # true division, as NumPy and MLX do
        return _broadcast(xs), dtype

    return infer


def infer_float_binary(op: str) -> Infer:
    """Binary float math (atan2): the promoted dtype must be floating point."""

    def infer(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
        dtype = promote_types(xs[0].dtype, xs[1].dtype)
        if not dtype.is_float:
            raise DTypeError(
                f"{op} needs a floating-point operand but {xs[0].label} is {xs[0].dtype} "
                f"and {xs[1].label} is {xs[1].dtype}"
            )
        return _broadcast(xs), dtype

    return infer


def infer_bitwise(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    """bitwise_not/and/or/xor: integer or bool operands, the promoted dtype."""
    for x in xs:
        if x.dtype.is_float:
            raise DTypeError(f"bitwise ops need integer or bool inputs but {x.label} is {x.dtype}")
    dtype = xs[0].dtype
    for x in xs[1:]:
        dtype = promote_types(dtype, x.dtype)
    return _broadcast(xs), dtype


def infer_predicate(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    """isnan/isinf: any dtype, a bool result (always False for integers and bools)."""
    return xs[0].shape, bool_


def infer_minmax(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    return _broadcast(xs), promote_types(xs[0].dtype, xs[1].dtype)


def infer_compare(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    return _broadcast(xs), bool_


def infer_logical(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    for x in xs:
        if x.dtype != bool_:
            raise DTypeError(f"logical ops need bool inputs but {x.label} is {x.dtype}")
    return _broadcast(xs), bool_


def infer_where(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    cond, a, b = xs
    if cond.dtype != bool_:
        raise DTypeError(f"where needs a bool condition but {cond.label} is {cond.dtype}")
    return _broadcast(xs), promote_types(a.dtype, b.dtype)


def infer_matmul(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    a, b = xs
    for x in xs:
        _need_numeric(x, "matmul")
        if len(x.shape) == 0:
            raise ShapeError(f"matmul needs operands of rank >= 1 but {x.label} is a scalar")
    a_shape = (1, *a.shape) if len(a.shape) == 1 else a.shape
    b_shape = (*b.shape, 1) if len(b.shape) == 1 else b.shape
    if a_shape[-1] != b_shape[-2]:  # different ints, or extents not identical
        inner = always(a_shape[-1], "==", b_shape[-2])
        if inner is None:
            raise undecided(
                f"inner dims {a_shape[-1]} == {b_shape[-2]} of {a.label} @ {b.label}",
                a_shape[-1],
                b_shape[-2],
            )
        if not inner:
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


def _transposed_operand(op: str, which: int) -> Infer:
    """matmul's rule with operand `which` read as its transpose (its last two axes
    swapped); both operands need two axes or more."""

    def infer(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
        for x in xs:
            if len(x.shape) < 2:
                raise ShapeError(f"{op} needs operands of rank >= 2 but got {x}")
        x = xs[which]
        swapped = evolve(x, label=f"{x.label}.T", shape=(*x.shape[:-2], x.shape[-1], x.shape[-2]))
        return infer_matmul([swapped, xs[1]] if which == 0 else [xs[0], swapped], attrs)

    return infer


# a (..., M, K) @ b (..., N, K) read as its transpose (..., K, N)
infer_matmul_transposed = _transposed_operand("matmul_transposed", 1)
# a (..., K, M) read as its transpose (..., M, K) @ b (..., K, N)
infer_matmul_transposed_a = _transposed_operand("matmul_transposed_a", 0)


def check_axes(x: Operand, axes: tuple[int, ...]) -> None:
    """ShapeError unless `axes` are sorted, unique and within `x`'s rank."""
    rank = len(x.shape)
    if any(not 0 <= a < rank for a in axes) or list(axes) != sorted(set(axes)):
        raise ShapeError(
            f"axes {axes} must be sorted, unique and in [0, {rank}) for {x.label} {x.shape}"
        )


def _nonempty(x: Operand, axis: int, op: str) -> bool:
    """Whether axis `axis` of x is non-empty for every value of its dims (False when it
    is empty for every value; `undecided` when only for some)."""
    extent = x.shape[axis]
    if is_static(extent):
        return extent != 0
    holds = always(extent, ">", 0)
    if holds is None:
        raise undecided(f"{op}: axis {axis} of {x} is non-empty ({extent} > 0)", extent)
    return holds


def _reduced_shape(x: Operand, axes: tuple[int, ...], keepdims: bool) -> Shape:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    return tuple(d for i, d in enumerate(x.shape) if i not in axes)


def infer_reduce(op: str) -> Infer:
    def infer(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
        (x,) = xs
        axes = attrs["axes"]
        check_axes(x, axes)
        if op in ("max", "min") and not all(_nonempty(x, a, op) for a in axes):
            raise ShapeError(f"{op} over a zero-size axis of {x.label} {x.shape} has no identity")
        dtype = x.dtype
        if op in ("sum", "prod") and dtype == bool_:
            dtype = int32
        if op in ("any", "all"):
            dtype = bool_
        if op == "mean" and not dtype.is_float:
            dtype = float32
        return _reduced_shape(x, axes, attrs["keepdims"]), dtype

    return infer


def infer_arg_reduce(op: str) -> Infer:
    """argmax/argmin: an int32 index along `axis`, which must not be empty."""

    def infer(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
        (x,) = xs
        axis = attrs["axis"]
        check_axes(x, (axis,))
        if not _nonempty(x, axis, op):
            raise ShapeError(f"{op} over the zero-size axis {axis} of {x.label} {x.shape}")
        return _reduced_shape(x, (axis,), attrs["keepdims"]), int32

    return infer


def infer_scan(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    """cumsum/cumprod: x's shape, accumulated in the `dtype` attribute (the builder
    resolves torch's default: int64 for integers and bools, else x's dtype)."""
    (x,) = xs
    check_axes(x, (attrs["axis"],))
    return x.shape, as_dtype(attrs["dtype"])


def infer_sort(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    """sort: x's shape and dtype (values in order along `axis`); argsort: their int64
    positions. Numbers only: bools have no order worth a sort here."""
    (x,) = xs
    if x.dtype.name == "bool":
        raise DTypeError(f"sorting needs numbers but {x.label} is bool")
    check_axes(x, (attrs["axis"],))
    return x.shape, x.dtype


def infer_argsort(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    shape, _ = infer_sort(xs, attrs)
    return shape, as_dtype("int64")


def infer_softmax(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    (x,) = xs
    _need_float(x, "softmax")
    check_axes(x, (attrs["axis"],))
    return x.shape, x.dtype


def infer_transpose(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    (x,) = xs
    axes = attrs["axes"]
    if sorted(axes) != list(range(len(x.shape))):
        raise ShapeError(f"axes {axes} are not a permutation of {x.label}'s {len(x.shape)} dims")
    return tuple(x.shape[a] for a in axes), x.dtype


def infer_reshape(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    (x,) = xs
    shape = attrs["shape"]
    count, target = numel(x.shape), numel(shape)
    if type(count) is int and type(target) is int:  # static: the int rule
        if any(d < 0 for d in shape) or target != count:
            raise ShapeError(f"cannot reshape {x.label} {x.shape} to {shape}")
        return shape, x.dtype
    error = ShapeError(f"cannot reshape {x.label} {x.shape} to {shape}")
    for d in shape:
        require(d, ">=", 0, error)
    count = canonical(count)
    require(canonical(target), "==", count, error, f"{x} has {count} elements to {shape}")
    return shape, x.dtype


def infer_cast(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    return xs[0].shape, as_dtype(attrs["dtype"])


def infer_narrow(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    (x,) = xs
    axis, start, length = attrs["axis"], attrs["start"], attrs["length"]
    check_axes(x, (axis,))
    extent = x.shape[axis]
    error = ShapeError(
        f"narrow [{start}, {start + length}) is outside axis {axis} of {x.label} {x.shape}"
    )
    if type(start) is int and type(length) is int and type(extent) is int:
        if start < 0 or length < 0 or start + length > extent:
            raise error
    else:
        require(start, ">=", 0, error)
        require(length, ">=", 0, error)
        require(start + length, "<=", extent, error)
    return tuple(length if i == axis else d for i, d in enumerate(x.shape)), x.dtype


def infer_concat(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    first = xs[0]
    axis = attrs["axis"]
    check_axes(first, (axis,))
    for x in xs[1:]:
        same = len(x.shape) == len(first.shape) and all(
            same_extent(e, d, f"concatenate: {first} and {x} agree on axis {i}")
            for i, (d, e) in enumerate(zip(x.shape, first.shape, strict=True))
            if i != axis
        )
        if not same:
            raise ShapeError(f"concatenate along axis {axis}: {first} and {x} differ off-axis")
        if x.dtype != first.dtype:
            raise DTypeError(f"concatenate: {first.label} is {first.dtype}, {x.label} {x.dtype}")
    total = sum(x.shape[axis] for x in xs)
    return tuple(total if i == axis else d for i, d in enumerate(first.shape)), first.dtype


def same_extent(a: object, b: object, condition: str) -> bool:
    """Whether two extents are equal for every value of their dims (`undecided`, naming
    `condition`, when only for some)."""
    if a == b:
        return True
    holds = always(a, "==", b)
    if holds is None:
        raise undecided(f"{condition} ({a} == {b})", a, b)
    return holds


def always_holds(a: object, relation: str, b: object, condition: str) -> bool:
    """`always(a, relation, b)` as a bool; `undecided` naming `condition` when None."""
    holds = always(a, relation, b)
    if holds is None:
        raise undecided(f"{condition} ({a} {relation} {b})", a, b)
    return holds


def infer_arange(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    start, stop, step = attrs["start"], attrs["stop"], attrs["step"]
    if step == 0:
        raise ShapeError("arange step must be non-zero")
    if isinstance(start, sympy.Basic) or isinstance(stop, sympy.Basic):
        return (_symbolic_count(start, stop, step),), as_dtype(attrs["dtype"])
    return (max(0, math.ceil((stop - start) / step)),), as_dtype(attrs["dtype"])


def _symbolic_count(start: object, stop: object, step: object) -> object:
    """The element count of arange(start, stop, step) with an extent bound: int start and
    step, and stop - start of one sign for every value of the dims (else `undecided`)."""
    if not isinstance(step, int) or isinstance(start, float) or isinstance(stop, float):
        raise ShapeError(
            f"arange({start}, {stop}, {step}) with an extent bound needs int start and step"
        )
    count = canonical(sympy.ceiling(sympy.Rational(1, step) * (stop - start)))
    nonempty = always(count, ">=", 0)
    if nonempty is None:
        raise undecided(f"arange({start}, {stop}, {step}) has {count} >= 0 elements", count)
    return count if nonempty else 0


def infer_full(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    _check_sizes(attrs["shape"], "full: ")
    return attrs["shape"], as_dtype(attrs["dtype"])


def infer_broadcast_to(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    (x,) = xs
    shape = attrs["shape"]
    if broadcast_shapes(x.shape, shape, labels=[x.label, "target"]) != shape:
        raise ShapeError(f"cannot broadcast {x.label} {x.shape} to {shape}")
    return shape, x.dtype


def _check_sizes(shape: Shape, prefix: str) -> None:
    """ShapeError for an entry below 0 for every value, `undecided` for some."""
    if any(type(d) is not int or d < 0 for d in shape):
        for d in shape:
            require(d, ">=", 0, ShapeError(f"{prefix}negative dim in {shape}"))


def infer_boundary(xs: Sequence[Operand], attrs: Mapping) -> tuple[Shape, DType]:
    _check_sizes(attrs["shape"], "")
    dtype = as_dtype(attrs["dtype"])
    if "value" in attrs and len(attrs["value"]) != numel(attrs["shape"]) * dtype.itemsize:
        raise ShapeError(f"constant payload of {len(attrs['value'])} bytes for {attrs['shape']}")
    return attrs["shape"], dtype
