"""Shapes: broadcasting, axis normalisation and element counts.

Every function raises ShapeError with a message that names the offending shapes; the
caller prefixes the node (`%7 add: ...`). Entries may be `tg.Dim` extents (`ir.dims`):
extents equal for every value of their dims are equal, and a condition the dims' ranges
do not decide is a GraphError naming it (`dims.undecided`); int shapes take the int path.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import sympy

from tensorgraph.errors import ShapeError
from tensorgraph.ir.dims import always, canonical, extent_or_int, is_static, undecided

Shape = tuple[int, ...]


def numel(shape: Iterable[int]) -> int:
    """Number of elements of a shape (1 for a scalar, 0 when any dim is 0)."""
    return math.prod(shape)


def broadcast_shapes(*shapes: Sequence[int], labels: Sequence[str] | None = None) -> Shape:
    """NumPy broadcasting: align trailing dims; each pair must be equal or contain a 1."""
    rank = max((len(s) for s in shapes), default=0)
    result = []
    for axis in range(-rank, 0):
        dims = {s[axis] for s in shapes if len(s) >= -axis}
        sized = dims - {1}
        if len(sized) > 1:
            named = ", ".join(
                f"{labels[i]} {tuple(s)}" if labels else str(tuple(s)) for i, s in enumerate(shapes)
            )
            sized = _equal_extents([s[axis] for s in shapes if len(s) >= -axis], named)
        result.append(sized.pop() if sized else 1)
    return tuple(result)


def _equal_extents(extents: list, named: str) -> set:
    """The one extent (as a set) of entries that are all equal or 1 for every value of
    their dims; ShapeError when two differ for every value, `undecided` when for some."""
    sized = [e for e in extents if not (is_static(e) and e == 1)]
    first = sized[0]
    for other in sized[1:]:
        same = always(first, "==", other)
        if same is None:
            raise undecided(f"shapes {named} broadcast ({first} == {other})", first, other)
        if not same:
            raise ShapeError(f"shapes do not broadcast: {named}")
    return {first}


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    """`axis` as a non-negative index into a shape of `rank` dims."""
    if not -rank <= axis < rank:
        raise ShapeError(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank


def normalize_axes(axes: Iterable[int] | None, rank: int) -> tuple[int, ...]:
    """Sorted, non-negative, unique axes; None means every axis."""
    if axes is None:
        return tuple(range(rank))
    if isinstance(axes, int):
        axes = (axes,)
    normal = [normalize_axis(a, rank) for a in axes]
    if len(set(normal)) != len(normal):
        raise ShapeError(f"repeated axis in {tuple(axes)}")
    return tuple(sorted(normal))


def resolve_reshape(shape: Sequence[int], new_shape: Sequence[int]) -> Shape:
    """`new_shape` with at most one -1 resolved so it holds as many elements as `shape`.
    Entries may be extents of Dims; with any in either shape, the -1 must divide for
    every value of the dims (`undecided` otherwise)."""
    new_shape = tuple(extent_or_int(d, "reshape target") for d in new_shape)
    unknown = [i for i, d in enumerate(new_shape) if is_static(d) and d == -1]
    if len(unknown) > 1 or any(is_static(d) and d < -1 for d in new_shape):
        raise ShapeError(f"cannot reshape {tuple(shape)} to {new_shape}: bad target dims")
    if not all(is_static(d) for d in (*shape, *new_shape)):
        return _resolve_symbolic(tuple(shape), new_shape, unknown)
    total = numel(shape)
    if unknown:
        known = numel(d for d in new_shape if d != -1)
        if known == 0 or total % known:
            raise ShapeError(f"cannot reshape {tuple(shape)} to {new_shape}")
        new_shape = tuple(total // known if d == -1 else d for d in new_shape)
    if numel(new_shape) != total:
        raise ShapeError(
            f"cannot reshape {tuple(shape)} ({total} elements) to {new_shape} "
            f"({numel(new_shape)} elements)"
        )
    return new_shape


def _resolve_symbolic(shape: Shape, new_shape: Shape, unknown: list[int]) -> Shape:
    """`resolve_reshape` when an extent holds a Dim: the -1 is total / known, which must
    be an integer for every value of the dims (`undecided` naming both otherwise)."""
    if not unknown:
        return new_shape
    total = canonical(numel(shape))
    known = canonical(numel(d for d in new_shape if not (is_static(d) and d == -1)))
    if is_static(known) and known == 0:
        raise ShapeError(f"cannot reshape {shape} to {new_shape}")
    quotient = canonical(sympy.cancel(sympy.sympify(total) / known))
    if not is_static(quotient) and quotient.is_integer is not True:
        raise undecided(f"{total} elements divide into {new_shape}", total, known)
    holds = always(quotient, ">=", 0)
    if holds is None:
        raise undecided(f"{total} elements divide into {new_shape}", total, known)
    return tuple(quotient if i == unknown[0] else d for i, d in enumerate(new_shape))
