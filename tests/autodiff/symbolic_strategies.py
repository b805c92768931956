"""Random differentiable graphs over one `tg.Dim` (issue 27: the vector-Jacobian rules
on symbolic shapes). Inputs are (seq, D) or (B, seq, D) with `seq` a Dim (a batch or a
sequence axis); params stay static, (D,) and (D, D), and broadcast against them. The
ops are `tests.autodiff.strategies`' unaries, broadcasting binaries, matmuls and
reductions (over any axis, the symbolic one included: sums, means, softmax,
log_softmax, cumsum, cumprod), plus layout ops that keep to what holds for every
length: transposes, flattening reshapes, narrows (of a symbolic axis: 1 : seq),
concatenations, constant pads, slice updates of the first row, and takes of constant
indices along static axes. The loss sums each chosen value weighted by constants over
its static trailing axes, so every gradient depends on the length."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.ir.dims import always, is_static
from tests.autodiff.strategies import _binary, _matmul, _reduce, _unary

SEQ = tg.Dim("seq", min=2, max=6)


def _layout(draw: st.DrawFn, live: list[tg.Tensor]) -> tg.Tensor:
    x = draw(st.sampled_from(live))
    axis = draw(st.integers(0, x.ndim - 1))
    extent = x.shape[axis]
    kind = draw(st.integers(0, 6))
    if kind == 0:
        return x.T
    if kind == 1:
        return x.reshape(-1)
    if kind == 2 and always(extent, ">", 1):
        return tg.narrow(x, axis, 1, extent - 1)
    if kind == 3:
        return tg.concatenate([x, tg.tanh(x)], axis=axis)
    if kind == 4:
        pads = [(draw(st.integers(0, 2)), draw(st.integers(0, 1))) for _ in x.shape]
        return tg.pad(x, pads, value=0.5)
    if kind == 5:
        return tg.slice_update(x, tg.sin(tg.narrow(x, 0, 0, 1)), 0, 0)
    if is_static(extent):
        picks = draw(st.lists(st.integers(-extent, extent - 1), min_size=1, max_size=4))
        return tg.take(x, x.graph.constant(np.array(picks, np.int32)), axis)
    return tg.tanh(x)


BUILDERS = (_unary, _binary, _binary, _matmul, _reduce, _reduce, _layout, _layout)


def _static_suffix(shape: tuple) -> tuple[int, ...]:
    """The trailing axes after the last symbolic one."""
    suffix: list[int] = []
    for extent in reversed(shape):
        if not is_static(extent):
            break
        suffix.insert(0, int(extent))
    return tuple(suffix)


@st.composite
def symbolic_differentiable_graphs(draw: st.DrawFn, max_ops: int = 6) -> tg.Graph:
    """A scalar loss over one or two inputs with axis `SEQ` and one or two static
    params (see the module docstring); every param's bound value is set, so the graph
    also makes a training step."""
    g = tg.Graph("symbolic")
    depth = draw(st.integers(1, 4))
    lead = draw(st.sampled_from([(), (2,)]))
    shape = (*lead, SEQ, depth)
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    live = [g.input(f"x{i}", shape, tg.float32) for i in range(draw(st.integers(1, 2)))]
    live.append(g.param("w0", (depth,), value=rng.uniform(-1, 1, depth).astype(np.float32)))
    if draw(st.booleans()):
        square = rng.uniform(-1, 1, (depth, depth)).astype(np.float32)
        live.append(g.param("w1", (depth, depth), value=square))
    for _ in range(draw(st.integers(1, max_ops))):
        made = draw(st.sampled_from(BUILDERS))(draw, live)
        live.append(made.reshape(1) if made.ndim == 0 else made)
    chosen = draw(st.lists(st.sampled_from(live), min_size=1, max_size=2))
    if all(is_static(d) for t in chosen for d in t.shape):
        chosen.append(live[0])  # the loss reads the length
    terms = []
    for k, t in enumerate(chosen):
        suffix = _static_suffix(t.shape)
        weights = np.random.default_rng(k).uniform(-1, 1, suffix).astype(np.float32)
        terms.append((t * g.constant(weights)).sum())
    loss = terms[0]
    for term in terms[1:]:
        loss = loss + term
    g.output(loss)
    return g
