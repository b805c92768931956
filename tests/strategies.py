"""Hypothesis strategies for the whole suite: random valid graphs and their feeds.

Graphs mix broadcasting binaries, unaries, comparisons feeding `where`, views (reshape,
axis-0 narrow, same-dtype cast), copies (transpose, other-axis narrow), reductions,
softmax, matmul, concatenation, slice updates and fused ops, with 1-3 outputs that may
repeat or be an input or a view: the planner's edge cases. Every tensor a builder hands
on is non-empty, but fused ops also run on zero-size slices (attention over zero keys or
of head dim 0, norms of empty rows, group norm of batch 0, rope of length 0), their
empty results concatenated back onto a non-empty tensor. Values stay finite: every producer of
large values is squashed (exp only of tanh'd values), so oracles compare exactly.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import tensorgraph as tg

# Unaries whose output stays bounded for inputs in [-2, 2] (square is squashed by tanh);
# exp, log and sqrt only ever see arguments made safe for them.
SAFE_UNARY = (
    tg.negative,
    tg.abs,
    tg.tanh,
    tg.sigmoid,
    tg.relu,
    tg.silu,
    tg.gelu,
    lambda x: tg.tanh(tg.square(x)),
    lambda x: tg.exp(tg.tanh(x)),
    lambda x: tg.log(tg.abs(x) + 1.0),
    lambda x: tg.sqrt(tg.square(x) + 0.5),
)


def shapes(max_rank: int = 3, max_dim: int = 5) -> st.SearchStrategy[tuple[int, ...]]:
    return st.lists(st.integers(1, max_dim), min_size=1, max_size=max_rank).map(tuple)


def _pick(draw: st.DrawFn, live: list[tg.Tensor]) -> tg.Tensor:
    return draw(st.sampled_from(live))


def _unary(draw: st.DrawFn, live: list[tg.Tensor]) -> tg.Tensor:
    return draw(st.sampled_from(SAFE_UNARY))(_pick(draw, live))


def _broadcastable(draw: st.DrawFn, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts against `shape`: a suffix, with some dims set to 1."""
    suffix = shape[draw(st.integers(0, len(shape) - 1)) :] if shape else ()
    return tuple(1 if draw(st.booleans()) else d for d in suffix)


def _binary(draw: st.DrawFn, live: list[tg.Tensor]) -> tg.Tensor:
    a = _pick(draw, live)
    op = draw(st.sampled_from((tg.add, tg.subtract, tg.multiply, tg.maximum, tg.minimum)))
    partners = [t for t in live if t.shape == a.shape]
    kind = draw(st.integers(0, 2))
    if kind == 0:
        b = draw(st.sampled_from(partners))
    elif kind == 1:
        b = draw(st.floats(-2, 2, allow_nan=False, width=32))
    else:
        shape = _broadcastable(draw, a.shape)
        b = tg.tanh(_reshaped(a.graph, live, shape, draw))
    if draw(st.booleans()):
        a, b = b, a
    result = op(a, b)
    return tg.tanh(result) if op is tg.multiply else result


def _reshaped(
    graph: tg.Graph, live: list[tg.Tensor], shape: tuple[int, ...], draw: st.DrawFn
) -> tg.Tensor:
    """Some live tensor brought to `shape` (sum over all axes, then broadcast)."""
    source = _pick(draw, live)
    total = tg.tanh(source.sum(keepdims=False))
    return tg.broadcast_to(total, shape) if shape else total


def _where(draw: st.DrawFn, live: list[tg.Tensor]) -> tg.Tensor:
    a = _pick(draw, live)
    b = draw(st.sampled_from([t for t in live if t.shape == a.shape]))
    compare = draw(st.sampled_from((tg.less, tg.greater_equal, tg.equal, tg.not_equal)))
    return tg.where(compare(a, b), a, b)


def _view(draw: st.DrawFn, live: list[tg.Tensor]) -> tg.Tensor:
    x = _pick(draw, live)
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return x.reshape(-1)
    if kind == 1 and x.shape[0] > 1:
        start = draw(st.integers(0, x.shape[0] - 1))
        length = draw(st.integers(1, x.shape[0] - start))
        return x[start : start + length]
    if kind == 2:
        return x.astype(tg.float32)
    axis = draw(st.integers(0, x.ndim - 1))
    if x.shape[axis] > 1:
        return tg.narrow(x, axis, 1, x.shape[axis] - 1)
    return x.reshape((*x.shape, 1))


def _layout(draw: st.DrawFn, live: list[tg.Tensor]) -> tg.Tensor:
    x = _pick(draw, live)
    kind = draw(st.integers(0, 2))
    if kind == 0:
        return x.T
    if kind == 1:
        other = draw(st.sampled_from(live))
        if other.ndim == x.ndim and other.shape[1:] == x.shape[1:]:
            return tg.concatenate([x, other], axis=0)
        return tg.concatenate([x, x], axis=-1)
    update = tg.tanh(x[:1])
    return tg.slice_update(x, update, 0, draw(st.integers(0, x.shape[0] - 1)))


def _reduce(draw: st.DrawFn, live: list[tg.Tensor]) -> tg.Tensor:
    x = _pick(draw, live)
    axis = draw(st.integers(-x.ndim, x.ndim - 1))
    kind = draw(st.integers(0, 3))
    keepdims = draw(st.booleans())
    if kind == 0:
        return tg.tanh(x.sum(axis, keepdims))
    if kind == 1:
        return x.mean(axis, keepdims)
    if kind == 2:
        return x.max(axis, keepdims)
    return tg.softmax(x, axis)


def _matmul(draw: st.DrawFn, live: list[tg.Tensor]) -> tg.Tensor:
    a = _pick(draw, live)
    partners = [t for t in live if t.ndim >= 1 and t.shape[0] == a.shape[-1]]
    if partners and a.ndim >= 1:
        b = draw(st.sampled_from(partners))
        if b.ndim <= 2:
            return tg.tanh(a @ b)
    return tg.tanh(a @ a.T) if a.ndim == 2 else _unary(draw, live)


def _fused(draw: st.DrawFn, live: list[tg.Tensor]) -> tg.Tensor:
    """A fused op over a live tensor x, seen as (1, 1, rows, D) for attention, (1, rows,
    D) otherwise. Normalisations only run on an empty slice (their value would amplify
    float32 rounding past the MLX tolerance), whose empty result is concatenated back
    onto x; attention and rope run on x itself or on an empty slice of it."""
    x = _pick(draw, live)
    shape, depth = x.shape, x.shape[-1]
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    kind = draw(st.sampled_from(["attention", "no_keys", "no_depth", "norm", "group", "rope"]))
    if kind in ("attention", "no_keys", "no_depth"):
        q = x.reshape((1, 1, rows, depth))
        mask = draw(st.sampled_from([None, "causal"]))
        if kind == "no_keys":  # every row attends to nothing: zeros
            keys = tg.narrow(q, 2, 0, 0)
            return tg.scaled_dot_product_attention(q, keys, keys, mask=mask).reshape(shape)
        if kind == "no_depth":  # scores all 0 at the default scale: rows average v
            empty = tg.narrow(q, 3, 0, 0)
            return tg.scaled_dot_product_attention(empty, empty, q, mask=mask).reshape(shape)
        return tg.scaled_dot_product_attention(q, q, q, mask=mask).reshape(shape)
    x3 = x.reshape((1, rows, depth))
    if kind == "norm":
        empty = tg.narrow(x, x.ndim - 1, 0, 0)
        normed = draw(st.sampled_from([tg.layer_norm, tg.rms_norm]))(empty)
        return tg.concatenate([x, normed], axis=x.ndim - 1)
    if kind == "group":  # batch 0
        groups = draw(st.sampled_from([g for g in range(1, rows + 1) if rows % g == 0]))
        normed = tg.group_norm(tg.narrow(x3, 0, 0, 0), groups)
        return tg.concatenate([normed, x3], axis=0).reshape(shape)
    if depth < 2:
        return _unary(draw, live)
    dims = 2 * draw(st.integers(1, depth // 2))
    traditional = draw(st.booleans())
    if draw(st.booleans()):  # length 0
        rotated = tg.rope(tg.narrow(x3, 1, 0, 0), dims, traditional=traditional)
        return tg.concatenate([x3, rotated], axis=1).reshape(shape)
    return tg.rope(x3, dims, traditional=traditional, offset=draw(st.integers(0, 4)))


BUILDERS = (
    _unary,
    _unary,
    _binary,
    _binary,
    _where,
    _view,
    _view,
    _layout,
    _reduce,
    _matmul,
    _fused,
)


@st.composite
def graphs(draw: st.DrawFn, max_ops: int = 12) -> tg.Graph:
    """Valid random graphs (see the module docstring)."""
    g = tg.Graph("random")
    shape = draw(shapes())
    live = [g.input(f"x{i}", shape, tg.float32) for i in range(draw(st.integers(1, 3)))]
    if draw(st.booleans()):
        live.append(g.param("w", shape, tg.float32))
        if draw(st.booleans()):  # a bound weight: a compile-time constant that may fold
            g.param_values["w"] = np.linspace(
                -1.5, 1.5, int(np.prod(shape)), dtype=np.float32
            ).reshape(shape)
    for _ in range(draw(st.integers(1, max_ops))):
        made = draw(st.sampled_from(BUILDERS))(draw, live)
        live.append(made.reshape(1) if made.ndim == 0 else made)  # builders need rank >= 1
    for t in draw(st.lists(st.sampled_from(live), min_size=1, max_size=3)):
        g.output(t)
    return g


def _grow(draw: st.DrawFn, live: list[tg.Tensor]) -> tg.Tensor:
    """A live value repeated 2-8 times along a new leading axis (larger than its source)
    and squashed, half the time summed back over that axis: a large value read only by a
    smaller one, as an MLP's hidden layer is."""
    x = _pick(draw, live)
    wide = tg.broadcast_to(x.reshape((1, *x.shape)), (draw(st.integers(2, 8)), *x.shape))
    wide = tg.tanh(wide)
    return tg.tanh(wide.sum(axis=0)) if draw(st.booleans()) else wide


@st.composite
def bound_graphs(draw: st.DrawFn, max_ops: int = 12) -> tg.Graph:
    """Random graphs over 1-2 bound weights (every builder above and `_grow`, so most
    values are known at compile time, some larger than their sources), whose 1-3
    outputs each read one of those values directly or scaled by a run-time scalar
    computed from the input: constant folding's cases, values read only at compile time
    and values read at run time."""
    g = tg.Graph("bound")
    shape = draw(shapes())
    x = g.input("x", shape, tg.float32)
    size = int(np.prod(shape))
    live = [
        g.param(
            f"w{i}", shape, tg.float32, np.linspace(-1.5, i, size, dtype=np.float32).reshape(shape)
        )
        for i in range(draw(st.integers(1, 2)))
    ]
    for _ in range(draw(st.integers(1, max_ops))):
        made = draw(st.sampled_from((*BUILDERS, _grow, _grow)))(draw, live)
        live.append(made.reshape(1) if made.ndim == 0 else made)
    scale = tg.tanh(x.sum())
    for t in draw(st.lists(st.sampled_from(live), min_size=1, max_size=3)):
        g.output(t * scale if draw(st.booleans()) else t)
    return g


@st.composite
def chains(draw: st.DrawFn, max_layers: int = 12) -> tg.Graph:
    """DNN-like graphs: a long elementwise/matmul chain with residual skip connections."""
    g = tg.Graph("chain")
    width = draw(st.integers(2, 8))
    x = g.input("x", (4, width), tg.float32)
    h, skips = x, [x]
    for layer in range(draw(st.integers(1, max_layers))):
        kind = draw(st.integers(0, 3))
        if kind == 0:
            h = tg.tanh(h @ g.param(f"w{layer}", (width, width), tg.float32))
        elif kind == 1:
            h = h + draw(st.sampled_from(skips))
        elif kind == 2:
            h = tg.silu(h) * 0.5
        else:
            h = tg.softmax(h, axis=-1)
        skips.append(h)
    g.output(h)
    return g


def feeds(graph: tg.Graph, seed: int = 0) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Random inputs and params in [-2, 2] matching `graph`'s declarations."""
    rng = np.random.default_rng(seed)

    def value(node: object) -> np.ndarray:
        return rng.uniform(-2, 2, node.shape).astype(node.dtype.to_numpy())

    inputs = {n.name: value(n) for n in graph.nodes if n.op == "input"}
    params = {
        n.name: value(n)
        for n in graph.nodes
        if n.op == "param" and n.name not in graph.param_values
    }
    return inputs, params


@st.composite
def samplers(draw: st.DrawFn) -> object:
    """Sampling parameters in range, each filter on or off: temperature 0 (greedy) or in
    (0, 2], top_k None or 1-8, top_p 1 or in (0, 1), min_p 0 or in (0, 0.5), seed."""
    from tensorgraph.models.sampling import Sampler

    unit = st.floats(0.05, 0.95, allow_nan=False)
    return Sampler(
        temperature=draw(st.just(0.0) | st.floats(0.1, 2.0, allow_nan=False)),
        top_k=draw(st.none() | st.integers(1, 8)),
        top_p=draw(st.just(1.0) | unit),
        min_p=draw(st.just(0.0) | st.floats(0.01, 0.5, allow_nan=False)),
        seed=draw(st.integers(0, 2**16)),
    )


# ---------------------------------------------------------------- symbolic dimensions

# The dims of symbolic graphs: small ranges, so tests can sample many lengths (and
# brute-force whole ranges); seq >= 2 leaves room for a narrow that drops an element.
DIMS = (tg.Dim("seq", min=2, max=9), tg.Dim("kv", min=1, max=6))
Template = tuple[int, int, int]  # (a, b, c): the extent a*seq + b*kv + c


def extent(template: Template, sizes: tuple[object, object]) -> object:
    """The extent `template` stands for, with `sizes` the dims (Dims or ints)."""
    a, b, c = template
    return a * sizes[0] + b * sizes[1] + c


def _smallest(template: Template) -> int:
    return template[0] * DIMS[0].min + template[1] * DIMS[1].min + template[2]


class _Choices:
    """The draw function of one symbolic build: `record` draws and remembers each value,
    `replay` hands the remembered values back in order, so a second build with ints in
    place of the Dims makes the same choices (they depend on templates only)."""

    def __init__(self, draw: st.DrawFn | None, values: list | None = None) -> None:
        self.draw, self.values, self.position = draw, values if values is not None else [], 0

    def __call__(self, strategy: st.SearchStrategy) -> object:
        if self.draw is not None:
            self.values.append(self.draw(strategy))
            return self.values[-1]
        self.position += 1
        return self.values[self.position - 1]


def _symbolic_step(choose: _Choices, g: tg.Graph, live: list, sizes: tuple) -> tuple:
    """One random op on `live` ((tensor, templates) pairs) of a symbolic build: returns
    the new pair. Every extent stays >= 1 for every value of the dims."""
    x, shape = live[choose(st.integers(0, len(live) - 1))]
    rank = len(shape)
    axis = choose(st.integers(0, rank - 1))
    kind = choose(st.integers(0, 13))
    if kind == 0:
        return choose(st.sampled_from(SAFE_UNARY))(x), shape
    if kind == 1:  # broadcasting binary with a new input, some axes of size 1
        partner = tuple((0, 0, 1) if choose(st.booleans()) else t for t in shape)
        other = g.input(f"b{len(g)}", [extent(t, sizes) for t in partner], tg.float32)
        op = choose(st.sampled_from((tg.add, tg.subtract, tg.multiply, tg.maximum)))
        return (op(x, other), shape) if choose(st.booleans()) else (op(other, x), shape)
    if kind == 2:
        keep = choose(st.booleans()) or rank == 1  # no rank-0 results: every op takes an axis
        op = choose(st.sampled_from((tg.sum, tg.mean, tg.max)))
        reduced = tuple((0, 0, 1) if i == axis else t for i, t in enumerate(shape))
        return op(x, axis, keepdims=keep), reduced if keep else shape[:axis] + shape[axis + 1 :]
    if kind == 3:
        return tg.softmax(x, axis), shape
    if kind == 4:
        perm = choose(st.permutations(range(rank)))
        return tg.transpose(x, perm), tuple(shape[p] for p in perm)
    if (
        kind == 5
        and axis + 1 < rank
        and (shape[axis][:2] == (0, 0) or shape[axis + 1][:2] == (0, 0))
    ):
        (a, b, c), (d, e, f) = shape[axis], shape[axis + 1]
        merged = (a * f + d * c, b * f + e * c, c * f)  # one of them is a constant
        target = [*shape[:axis], merged, *shape[axis + 2 :]]
        extents = [
            -1 if i == axis and choose(st.booleans()) else extent(t, sizes)
            for i, t in enumerate(target)
        ]
        return tg.reshape(x, extents), tuple(target)
    if kind == 6:  # split an axis whose coefficients a factor divides
        factor = choose(st.sampled_from((2, 3)))
        if all(v % factor == 0 for v in shape[axis]) and _smallest(shape[axis]) >= factor:
            part = tuple(v // factor for v in shape[axis])
            target = [*shape[:axis], part, (0, 0, factor), *shape[axis + 1 :]]
            extents = [extent(t, sizes) for t in target]
            if choose(st.booleans()):
                extents[axis] = -1
            return tg.reshape(x, extents), tuple(target)
    if kind == 7:
        same = [
            (t, s)
            for t, s in live
            if len(s) == rank and all(s[i] == shape[i] for i in range(rank) if i != axis)
        ]
        y, other = same[choose(st.integers(0, len(same) - 1))]
        joined = tuple(u + v for u, v in zip(shape[axis], other[axis], strict=True))
        return tg.concatenate([x, y], axis), (*shape[:axis], joined, *shape[axis + 1 :])
    if kind == 8:
        start, cut = choose(st.integers(0, 1)), choose(st.integers(0, 1))
        if _smallest(shape[axis]) - start - cut >= 1:
            a, b, c = shape[axis]
            part = (a, b, c - start - cut)
            return tg.narrow(x, axis, start, extent(part, sizes)), (
                *shape[:axis],
                part,
                *shape[axis + 1 :],
            )
    if kind == 9 and rank >= 2:
        if choose(st.booleans()):
            w = g.param(f"w{len(g)}", (extent(shape[-1], sizes), 3), tg.float32)
            return tg.tanh(x @ w), (*shape[:-1], (0, 0, 3))
        return tg.tanh(x @ tg.swapaxes(x, -1, -2)), (*shape[:-1], shape[-2])
    if kind == 10:  # generators of an extent: arange (through take) and full
        positions = tg.remainder(tg.arange(g, extent(shape[axis], sizes)), 5)
        table = g.param(f"t{len(g)}", (5, 2), tg.float32)
        if choose(st.booleans()):
            return tg.take(table, positions, 0), (shape[axis], (0, 0, 2))
        return tg.full(g, [extent(t, sizes) for t in shape], 0.5) * x, shape
    if kind == 11:
        lo, hi = choose(st.integers(0, 2)), choose(st.integers(0, 2))
        pads = [(lo, hi) if i == axis else (0, 0) for i in range(rank)]
        a, b, c = shape[axis]
        return tg.pad(x, pads, 0.25), (*shape[:axis], (a, b, c + lo + hi), *shape[axis + 1 :])
    if kind == 12:  # a summed axis of size 1 broadcast back to one of the live extents
        target = live[choose(st.integers(0, len(live) - 1))][1][0]
        summed = tg.sum(x, axis, keepdims=True)
        wanted = tuple(target if i == axis else t for i, t in enumerate(shape))
        return tg.broadcast_to(summed, [extent(t, sizes) for t in wanted]), wanted
    if (
        kind == 13
        and rank >= 2
        and shape[-1][:2] == (0, 0)
        and sum(t[:2] != (0, 0) for t in shape[:-1]) <= 1
    ):
        rows = (0, 0, 1)
        for t in shape[:-1]:
            rows = (
                rows[0] * t[2] + t[0] * rows[2],
                rows[1] * t[2] + t[1] * rows[2],
                rows[2] * t[2],
            )
        q = tg.reshape(x, (1, 1, extent(rows, sizes), extent(shape[-1], sizes)))
        mask = "causal" if choose(st.booleans()) else None
        out = tg.scaled_dot_product_attention(q, q, q, mask=mask)
        return tg.reshape(out, [extent(t, sizes) for t in shape]), shape
    return tg.negative(x), shape


def build_symbolic(choose: _Choices, sizes: tuple[object, object], max_ops: int) -> tg.Graph:
    """A random graph whose extents are affine in `sizes` (the Dims, or ints standing for
    them); see `symbolic_graphs`."""
    g = tg.Graph("symbolic")
    entries = st.sampled_from(((1, 0, 0), (0, 1, 0), (0, 0, 1), (0, 0, 2), (0, 0, 3)))
    live = []
    for i in range(choose(st.integers(1, 2))):
        shape = tuple(choose(st.lists(entries, min_size=1, max_size=3)))
        if i == 0 and all(t[:2] == (0, 0) for t in shape):
            shape = ((1, 0, 0), *shape)  # the first input carries seq
        live.append((g.input(f"x{i}", [extent(t, sizes) for t in shape], tg.float32), shape))
    for _ in range(choose(st.integers(1, max_ops))):
        live.append(_symbolic_step(choose, g, live, sizes))
    for k in choose(st.lists(st.integers(0, len(live) - 1), min_size=1, max_size=3)):
        g.output(live[k][0])
    return g


@st.composite
def symbolic_graphs(draw: st.DrawFn, max_ops: int = 8) -> tuple[tg.Graph, object]:
    """(graph, rebuild): a random graph over `DIMS` (broadcasting binaries, unaries,
    reductions, softmax, transpose, reshapes merging and splitting axes with or without
    -1, concatenation, narrow, matmul, arange/take, full, pad, broadcast_to, attention),
    and `rebuild(seq, kv)`, which makes the same graph with those ints in place of the
    Dims, independently of `tg.specialize`."""
    recorded = _Choices(draw)
    graph = build_symbolic(recorded, DIMS, max_ops)

    def rebuild(seq: int, kv: int) -> tg.Graph:
        return build_symbolic(_Choices(None, recorded.values), (seq, kv), max_ops)

    return graph, rebuild


@st.composite
def transposed_matmul_graphs(draw: st.DrawFn) -> tuple[tg.Graph, int, int]:
    """(graph, matmuls of a transposed operand, transposes only those matmuls read): 1-3
    products `a @ swapaxes(w, -1, -2)` of batched operands (rank 2-4, batch axes that
    broadcast), some through a reshape that regroups the transpose's batch axes, w an
    input, a param or a bound param, and the transpose sometimes also read by another
    op or returned; plus a matmul of a transpose that swaps other axes (not rewritten)."""
    g = tg.Graph("transposed_matmuls")
    outs, absorbed, dropped = [], 0, 0
    for k in range(draw(st.integers(1, 3))):
        m, n, inner = (draw(st.integers(1, 4)) for _ in range(3))
        batch = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
        a = g.input(f"a{k}", (*batch, m, inner), tg.float32)
        w_shape = (*batch[len(batch) - draw(st.integers(0, len(batch))) :], n, inner)
        kind = draw(st.sampled_from(("input", "param", "bound")))
        w = (g.input if kind == "input" else g.param)(f"w{k}", w_shape, tg.float32)
        if kind == "bound":
            g.param_values[f"w{k}"] = np.linspace(-1, 1, int(np.prod(w_shape)), dtype=np.float32)
            g.param_values[f"w{k}"] = g.param_values[f"w{k}"].reshape(w_shape)
        t = tg.swapaxes(w, -1, -2)
        b = t
        if len(w_shape) == 4 and draw(st.booleans()):  # regroup (B1, B2) into one axis
            b = t.reshape(w_shape[0] * w_shape[1], inner, n)
            a = a.reshape(-1, m, inner) if a.ndim == 4 else a
        outs.append(tg.tanh(a @ b))
        absorbed += 1
        shared = draw(st.sampled_from(("only", "read", "returned")))
        if shared == "read":
            outs.append(tg.exp(tg.tanh(t)))
        elif shared == "returned":
            outs.append(t)
        dropped += shared == "only"
    y = g.input("y", (4, 3, 2), tg.float32)  # (1, 0, 2) keeps the last axis: no rewrite
    outs.append(tg.tanh(g.input("x", (3, 2, 4), tg.float32) @ tg.transpose(y, (1, 0, 2))))
    g.output(*outs)
    return g, absorbed, dropped
