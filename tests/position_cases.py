"""Cases of the run-time position tests (tests/*/test_dynamic_positions.py): a
slice_update whose start and a rope whose offset are fed at run time, the graphs that
run them with the position as an int attribute or as a scalar input, and the NumPy
expressions they are checked against (written here, not taken from the kernels).

A position is an int32 or int64 input of shape () or (1,); `feed_position` makes the
array for a value. Slice cases keep the update's rows within the axis (an axis of
length 0 included), so every in-range start has at least one value.
"""

from __future__ import annotations

import numpy as np
from attrs import frozen
from hypothesis import strategies as st

import tensorgraph as tg


@frozen
class Position:
    """How a run-time position is declared: its dtype name and its shape."""

    dtype: str
    shape: tuple[int, ...]


positions = st.builds(Position, st.sampled_from(["int32", "int64"]), st.sampled_from([(), (1,)]))


def feed_position(position: Position, value: int) -> np.ndarray:
    return np.full(position.shape, value, dtype=position.dtype)


@frozen
class SliceCase:
    """slice_update of a (shape, dtype) target with `rows` rows along `axis` from `start`."""

    shape: tuple[int, ...]
    axis: int
    rows: int
    start: int
    dtype: str
    position: Position

    @property
    def extent(self) -> int:
        return self.shape[self.axis]

    @property
    def update_shape(self) -> tuple[int, ...]:
        return tuple(self.rows if k == self.axis else d for k, d in enumerate(self.shape))


@st.composite
def slice_cases(draw: st.DrawFn, dtypes: tuple[str, ...] = ("float32", "int32", "float16")):
    """A valid case: any rank 1-3, any axis, 0..extent rows, a start where they fit."""
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=1, max_size=3)))
    axis = draw(st.integers(0, len(shape) - 1))
    rows = draw(st.integers(0, shape[axis]))
    start = draw(st.integers(0, shape[axis] - rows))
    return SliceCase(shape, axis, rows, start, draw(st.sampled_from(dtypes)), draw(positions))


def bad_starts(case: SliceCase) -> st.SearchStrategy[int]:
    """Starts where the case's rows do not fit: negative, or past extent - rows."""
    last = case.extent - case.rows
    return st.one_of(st.integers(-6, -1), st.integers(last + 1, last + 6))


def slice_arrays(case: SliceCase, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Target and update with distinct values (so a misplaced row shows)."""
    rng = np.random.default_rng(seed)
    target = rng.integers(-50, 50, case.shape).astype(case.dtype)
    update = rng.integers(100, 150, case.update_shape).astype(case.dtype)
    return target, update


def expected_slice(case: SliceCase, target: np.ndarray, update: np.ndarray, start: int):
    """The oracle: NumPy's own slice assignment into a copy of the target."""
    result = target.copy()
    index = [slice(None)] * target.ndim
    index[case.axis] = slice(start, start + case.rows)
    result[tuple(index)] = update
    return result


def slice_graph(case: SliceCase, dynamic: bool) -> tg.Graph:
    """target, update[, pos] -> slice_update: start from input `pos` or the int `start`."""
    g = tg.Graph("slice")
    target = g.input("target", case.shape, tg.ir.as_dtype(case.dtype))
    update = g.input("update", case.update_shape, tg.ir.as_dtype(case.dtype))
    if dynamic:
        position = g.input("pos", case.position.shape, tg.ir.as_dtype(case.position.dtype))
        g.output(tg.slice_update(target, update, case.axis, position))
    else:
        g.output(tg.slice_update(target, update, case.axis, case.start))
    return g


def slice_feeds(case: SliceCase, seed: int, start: int) -> dict[str, np.ndarray]:
    target, update = slice_arrays(case, seed)
    return {"target": target, "update": update, "pos": feed_position(case.position, start)}


def out_of_range_pattern(case: SliceCase, start: int) -> str:
    """The RunError every backend raises for `start`: both numbers and the length."""
    if start < 0:
        return (
            rf"%\d+ slice_update: start {start} is negative \({case.rows} rows into the "
            rf"length {case.extent} of axis {case.axis}\)"
        )
    return (
        rf"%\d+ slice_update: start {start} \+ {case.rows} rows is past the length "
        rf"{case.extent} of axis {case.axis}"
    )


@frozen
class RopeCase:
    """rope of x (shape, float32) over `dims` features from position `offset`."""

    shape: tuple[int, ...]
    dims: int
    traditional: bool
    base: float
    scale: float
    offset: int
    position: Position


@st.composite
def rope_cases(draw: st.DrawFn, max_offset: int = 600) -> RopeCase:
    """x (..., L, D) of rank 2-4, D even, dims even in [2, D], any offset in a range
    that covers a decode loop's positions (negative ones included)."""
    lead = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    length = draw(st.integers(1, 5))
    features = 2 * draw(st.integers(1, 4))
    dims = 2 * draw(st.integers(1, features // 2))
    return RopeCase(
        (*lead, length, features),
        dims,
        draw(st.booleans()),
        draw(st.sampled_from([10000.0, 500.0])),
        draw(st.sampled_from([1.0, 0.5])),
        draw(st.integers(-20, max_offset)),
        draw(positions),
    )


def rope_graph(case: RopeCase, dynamic: bool) -> tg.Graph:
    """x[, pos] -> rope: the offset from input `pos` or the int `offset`."""
    g = tg.Graph("rope")
    x = g.input("x", case.shape, tg.float32)
    options = {"traditional": case.traditional, "base": case.base, "scale": case.scale}
    if dynamic:
        position = g.input("pos", case.position.shape, tg.ir.as_dtype(case.position.dtype))
        g.output(tg.rope(x, case.dims, offset=position, **options))
    else:
        g.output(tg.rope(x, case.dims, offset=case.offset, **options))
    return g


def rope_feeds(case: RopeCase, seed: int) -> dict[str, np.ndarray]:
    x = np.random.default_rng(seed).uniform(-2, 2, case.shape).astype(np.float32)
    return {"x": x, "pos": feed_position(case.position, case.offset)}


def static_feeds(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The feeds of the int-position graph: all but `pos`."""
    return {name: value for name, value in feeds.items() if name != "pos"}
