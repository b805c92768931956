"""prod/any/all/argmin, cumsum/cumprod (torch's dtype rule), gather (torch.gather) and
sort/argsort (stable, either direction)
through the builder, against loops over Python numbers or plain index arithmetic (see
tests/ir/op_cases.py), never the kernels' own NumPy calls."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.ir.dtypes import as_dtype
from tests.ir.op_cases import BF16, F16, F64, Arrays, Case, build_and_run, case_adder, check_case

CASES: list[Case] = []
case = case_adder(CASES)
_random = Arrays(seed=13)
rand, ints, flags = _random.rand, _random.ints, _random.flags


def along(fn, axis, keepdims=False, otype=object):
    """`fn` applied to each 1-D line of x along `axis` (as Python numbers), by loops."""

    def apply(x):
        ax = axis % x.ndim
        moved = np.moveaxis(x, ax, -1)
        lines = moved.reshape(-1, moved.shape[-1])
        values = np.array([fn(line.tolist()) for line in lines], dtype=otype)
        out = values.reshape(moved.shape[:-1])
        return np.expand_dims(out, ax) if keepdims else out

    return apply


def over_axes(fn, axes, keepdims):
    """`fn` over several axes: the axes moved last and flattened into one line."""

    def apply(x):
        listed = (axes,) if isinstance(axes, int) else axes
        chosen = tuple(range(x.ndim)) if listed is None else tuple(a % x.ndim for a in listed)
        rest = [a for a in range(x.ndim) if a not in chosen]
        moved = np.transpose(x, rest + list(chosen)).reshape(
            [x.shape[a] for a in rest] + [math.prod(x.shape[a] for a in chosen)]
        )
        out = along(fn, -1)(moved) if moved.ndim > 1 else np.array(fn(moved.tolist()), object)
        if keepdims:
            out = out.reshape([1 if a in chosen else x.shape[a] for a in range(x.ndim)])
        return out

    return apply


def _product(values):
    return math.prod(values)


# ---------------------------------------------------------------- prod, any, all

for _axis in (None, 0, -1, (0, 2)):
    for _keep in (False, True):
        _name = f"axis={_axis}-keepdims={_keep}"
        _x = rand(2, 3, 4, low=0.5, high=1.5)
        case(
            "prod",
            _name,
            [_x],
            lambda x, a=_axis, k=_keep: tg.prod(x, a, k),
            tg.float32,
            over_axes(_product, _axis, _keep),
        )
        for _op, _py in (("any", any), ("all", all)):
            _b = flags(2, 3, 4)
            case(
                _op,
                _name,
                [_b],
                lambda x, a=_axis, k=_keep, o=_op: getattr(tg, o)(x, a, k),
                tg.bool_,
                over_axes(_py, _axis, _keep),
            )
case(
    "prod",
    "int8-wraps",
    [ints(3, 5, low=-9, high=9, dtype=np.int8)],
    lambda x: tg.prod(x, 1),
    tg.int8,
    lambda x: (along(_product, 1)(x).astype(np.int64) % 256).astype(np.uint8).view(np.int8),
)
case("prod", "bool-as-int32", [flags(3, 4)], lambda x: tg.prod(x, 0), tg.int32, along(_product, 0))
case(
    "prod",
    "empty-axis-is-one",
    [rand(3, 0)],
    lambda x: tg.prod(x, 1),
    tg.float32,
    lambda x: np.ones(3),
)
case(
    "prod",
    "f16",
    [rand(2, 6, dtype=F16, low=0.5, high=1.5)],
    lambda x: tg.prod(x, -1),
    tg.float16,
    along(_product, -1, otype=F64),
)
case("prod", "0-d", [rand()], tg.prod, tg.float32, lambda x: x)
for _op, _py, _empty in (("any", any, False), ("all", all, True)):
    _fn = getattr(tg, _op)
    _mixed = np.array([[0.0, np.nan, 0.0], [0.0, 0.0, 0.0], [1.0, -2.0, 0.5]], np.float32)
    case(
        _op,
        "floats-nan-is-true",
        [_mixed],
        lambda x, f=_fn: f(x, 1),
        tg.bool_,
        along(lambda v, p=_py: p(e != 0 for e in v), 1),
    )
    case(
        _op,
        "ints",
        [ints(4, 3, low=-1, high=2)],
        lambda x, f=_fn: f(x, 0),
        tg.bool_,
        along(lambda v, p=_py: p(e != 0 for e in v), 0),
    )
    case(
        _op,
        f"empty-axis-is-{_empty}",
        [flags(2, 0)],
        lambda x, f=_fn: f(x, 1),
        tg.bool_,
        lambda x, e=_empty: np.full(2, e),
    )
    case(
        _op,
        "no-axes",
        [ints(3, low=-1, high=2)],
        lambda x, f=_fn: f(x, ()),
        tg.bool_,
        lambda x: x != 0,
    )

# ---------------------------------------------------------------- argmin


def _first_min(values):
    return min(range(len(values)), key=lambda i: (values[i], i))


_TIES = ints(3, 4, 5, low=0, high=3).astype(np.float32)  # ties: the first index wins
for _axis in (0, 1, -1):
    for _keep in (False, True):
        case(
            "argmin",
            f"axis={_axis}-keepdims={_keep}",
            [_TIES],
            lambda x, a=_axis, k=_keep: tg.argmin(x, a, k),
            tg.int32,
            along(_first_min, _axis, _keep),
        )
case("argmin", "flat", [_TIES], tg.argmin, tg.int32, lambda x: _first_min(x.reshape(-1).tolist()))
case(
    "argmin",
    "flat-keepdims",
    [_TIES],
    lambda x: tg.argmin(x, keepdims=True),
    tg.int32,
    lambda x: np.full((1, 1, 1), _first_min(x.reshape(-1).tolist())),
)
case(
    "argmin",
    "int8",
    [ints(4, 6, dtype=np.int8)],
    lambda x: tg.argmin(x, 1),
    tg.int32,
    along(_first_min, 1),
)
case(
    "argmin",
    "bf16",
    [rand(3, 7, dtype=BF16)],
    lambda x: tg.argmin(x, -1),
    tg.int32,
    along(_first_min, -1),
)

# ---------------------------------------------------------------- cumsum, cumprod


def _running(step):
    return lambda values: list(itertools.accumulate(values, step))


_ADD, _MUL = _running(lambda a, b: a + b), _running(lambda a, b: a * b)
for _op, _py in (("cumsum", _ADD), ("cumprod", _MUL)):
    _fn = getattr(tg, _op)
    for _axis in (0, 1, -1):
        _x = rand(3, 4, 2, low=0.5, high=1.5)
        case(
            _op,
            f"f32-axis={_axis}",
            [_x],
            lambda x, f=_fn, a=_axis: f(x, a),
            tg.float32,
            lambda x, p=_py, a=_axis: _scan_oracle(p, x, a, F64),
        )
    # torch's rule: integers and bools accumulate in int64, which holds 5**20 exactly
    for _x in (
        ints(2, 20, low=-5, high=6, dtype=np.int8),
        flags(3, 5),
        ints(4, 3, low=0, high=6, dtype=np.uint8),
    ):
        case(
            _op,
            f"{_x.dtype}-to-int64",
            [_x],
            lambda x, f=_fn: f(x, -1),
            tg.int64,
            lambda x, p=_py: _scan_oracle(p, x.astype(np.int64), -1, np.int64),
        )
    case(
        _op,
        "dtype=float32",
        [ints(3, 4)],
        lambda x, f=_fn: f(x, 0, dtype=tg.float32),
        tg.float32,
        lambda x, p=_py: _scan_oracle(p, x.astype(F64), 0, F64),
    )
    case(
        _op,
        "dtype=int32-from-float",
        [rand(5, low=-3, high=3)],
        lambda x, f=_fn: f(x, 0, dtype="int32"),
        tg.int32,
        lambda x, p=_py: _scan_oracle(p, x.astype(np.int32).astype(np.int64), 0, np.int64),
    )
    case(
        _op,
        "f16",
        [rand(2, 8, dtype=F16, low=0.5, high=1.5)],
        lambda x, f=_fn: f(x, 1),
        tg.float16,
        lambda x, p=_py: _scan_oracle(p, x.astype(F64), 1, F64),
    )
    case(_op, "0-d", [rand()], lambda x, f=_fn: f(x, -1), tg.float32, lambda x: x)
    case(
        _op,
        "zero-size",
        [rand(0, 3)],
        lambda x, f=_fn: f(x, 1),
        tg.float32,
        lambda x: np.zeros((0, 3)),
    )


def _scan_oracle(running, x, axis, otype):
    ax = axis % x.ndim
    moved = np.moveaxis(x, ax, -1)
    lines = [running(line.tolist()) for line in moved.reshape(-1, moved.shape[-1])]
    return np.moveaxis(np.array(lines, dtype=otype).reshape(moved.shape), -1, ax)


# ---------------------------------------------------------------- gather


def _gather_oracle(x, indices, axis):
    """out[p] = x[p with p[axis] replaced by indices[p]], for every position p."""
    out = np.empty(indices.shape, x.dtype)
    for position in itertools.product(*(range(n) for n in indices.shape)):
        source = list(position)
        source[axis] = int(indices[position])
        out[position] = x[tuple(source)]
    return out


GATHERS = [  # (x shape, indices shape, axis)
    ((4, 5), (4, 5), 0),
    ((4, 5), (2, 3), 1),  # smaller extents off the axis, as torch allows
    ((3, 4, 2), (3, 7, 2), 1),  # more indices than the axis is long
    ((3, 4, 2), (1, 2, 2), -1),
    ((5,), (0,), 0),
    ((2, 3), (2, 0), 1),
]
for _xs, _is, _axis in GATHERS:
    _x = rand(*_xs)
    _index = ints(*_is, low=0, high=_xs[_axis], dtype=np.int64)
    case(
        "gather",
        f"{_xs}-{_is}-axis={_axis}",
        [_x, _index],
        lambda x, i, a=_axis: tg.gather(x, i, a),
        tg.float32,
        lambda x, i, a=_axis: _gather_oracle(x, i, a % x.ndim),
    )
for _dtype, _index_dtype in ((np.int8, np.int32), (np.bool_, np.uint8), (BF16, np.int16)):
    _x = (flags(3, 4) if _dtype == np.bool_ else ints(3, 4)).astype(_dtype)
    _index = ints(3, 4, low=0, high=3, dtype=_index_dtype)
    case(
        "gather",
        f"{np.dtype(_dtype)}-by-{np.dtype(_index_dtype)}",
        [_x, _index],
        lambda x, i: tg.gather(x, i, 0),
        as_dtype(np.dtype(_dtype)),
        lambda x, i: _gather_oracle(x, i, 0),
    )


def line_by_line(fn, axis):
    """`fn` (a list -> a list of the same length) applied to each 1-D line along `axis`."""

    def apply(x):
        moved = np.moveaxis(x, axis, -1)
        lines = [fn(line.tolist()) for line in moved.reshape(-1, moved.shape[-1])]
        return np.moveaxis(np.array(lines).reshape(moved.shape), -1, axis)

    return apply


def _ranks(line, descending):
    """Python's sorted is stable in both directions (reverse keeps ties in order)."""
    return sorted(range(len(line)), key=lambda i: line[i], reverse=descending)


for _axis, _desc, _x in itertools.product(
    (0, 1, -1), (False, True), (_TIES, ints(3, 4, 6, low=-3, high=3))
):
    _tag = f"axis={_axis}-descending={_desc}-{_x.dtype}"
    case(
        "argsort",
        _tag,
        [_x],
        lambda x, a=_axis, d=_desc: tg.argsort(x, a, d),
        tg.int64,
        line_by_line(lambda line, d=_desc: _ranks(line, d), _axis),
    )
    case(
        "sort",
        _tag,
        [_x],
        lambda x, a=_axis, d=_desc: tg.sort(x, a, d),
        as_dtype(_x.dtype),
        line_by_line(lambda line, d=_desc: [line[i] for i in _ranks(line, d)], _axis),
    )
case(
    "sort",
    "float16",
    [rand(4, 5, dtype=F16)],
    tg.sort,
    tg.float16,
    line_by_line(sorted, -1),
)


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_inference_and_reference_numerics(c: Case) -> None:
    check_case(c)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize("bad", [-1, 4])
def test_gather_index_outside_the_axis_is_a_run_error(bad) -> None:
    # torch.gather has no negative indices: -1 is out of range, unlike take's.
    x, index = np.zeros((2, 4), np.float32), np.array([[0, bad]], np.int64)
    with pytest.raises(tg.RunError, match=rf"%\d+ gather: index {bad} is out of range"):
        build_and_run(lambda a, i: tg.gather(a, i, 1), (x, index))


def test_sorting_bools_is_a_dtype_error() -> None:
    g = tg.Graph("bad")
    with pytest.raises(tg.DTypeError, match=r"%\d+ sort: sorting needs numbers but flags"):
        tg.sort(g.input("flags", (3,), tg.bool_))


@pytest.mark.parametrize(
    ("x_shape", "index_shape", "index_dtype", "error", "message"),
    [
        ((3, 4), (3,), tg.int32, tg.ShapeError, "must have the rank"),
        ((3, 4), (4, 4), tg.int32, tg.ShapeError, "no larger extent"),
        ((3, 4), (3, 4), tg.float32, tg.DTypeError, "gather needs integer indices"),
    ],
)
def test_gather_shape_and_dtype_errors(x_shape, index_shape, index_dtype, error, message) -> None:
    g = tg.Graph("bad")
    x, index = g.input("x", x_shape), g.input("i", index_shape, index_dtype)
    with pytest.raises(error, match=rf"%\d+ gather: .*{message}"):
        tg.gather(x, index, 1)


def test_argmin_over_an_empty_axis_is_a_shape_error() -> None:
    g = tg.Graph("bad")
    with pytest.raises(tg.ShapeError, match=r"%\d+ argmin: argmin over the zero-size axis"):
        tg.argmin(g.input("x", (3, 0)), 1)
