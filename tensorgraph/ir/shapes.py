"""Static shapes: broadcasting, axis normalisation and element counts.

Every function raises ShapeError with a message that names the offending shapes; the
caller prefixes the node (`%7 add: ...`)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from tensorgraph.errors import ShapeError

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
            raise ShapeError(f"shapes do not broadcast: {named}")
        result.append(sized.pop() if sized else 1)
    return tuple(result)


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
    """`new_shape` with at most one -1 resolved so it holds as many elements as `shape`."""
    new_shape = tuple(int(d) for d in new_shape)
    unknown = [i for i, d in enumerate(new_shape) if d == -1]
    if len(unknown) > 1 or any(d < -1 for d in new_shape):
        raise ShapeError(f"cannot reshape {tuple(shape)} to {new_shape}: bad target dims")
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
