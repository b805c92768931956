"""The fused `elementwise` op (ir/elementwise_fused.py): a chain of elementwise ops as
one node computes what the chain computes, bit for bit, on every backend; the plan may
write it over an operand; a malformed program is a named error."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.codegen_mlx.fusion import program_chain
from tensorgraph.ir.elementwise_fused import fuse_since
from tensorgraph.planner.check import verify_plan
from tests.ir.op_cases import BF16, Case, case_adder, check_case

CASES: list[Case] = []  # the op table's cases (tests/ir/test_ops.py runs them all)
case = case_adder(CASES)


def _fused(build):
    """`build` over Tensors, fused into one `elementwise` node."""

    def run(*xs: tg.Tensor) -> tg.Tensor:
        first = xs[0].graph.next_id
        return fuse_since(build(*xs), first)

    return run


_rng = np.random.default_rng(5)
_m, _g = (
    _rng.standard_normal((3, 4)).astype(np.float32),
    _rng.standard_normal((3, 4)).astype(np.float32),
)
_v = _rng.uniform(0.1, 1, (3, 4)).astype(np.float32)
# AdamW's moment and weight updates against NumPy's float32 arithmetic, op by op
case(
    "elementwise",
    "moment",
    (_m, _g),
    _fused(lambda m, g: 0.9 * m + 0.1 * g),
    tg.float32,
    lambda m, g: np.float32(0.9) * m + np.float32(0.1) * g,
    rtol=0,
    atol=0,
)
case(
    "elementwise",
    "second-moment",
    (_v, _g),
    _fused(lambda v, g: 0.999 * v + 0.001 * tg.square(g)),
    tg.float32,
    lambda v, g: np.float32(0.999) * v + np.float32(0.001) * (g * g),
    rtol=0,
    atol=0,
)
case(
    "elementwise",
    "weight-broadcast",
    (_m, _v, _g[0]),
    _fused(lambda m, v, p: p - m / (tg.sqrt(v) + 1e-8)),
    tg.float32,
    lambda m, v, p: p - m / (np.sqrt(v) + np.float32(1e-8)),
    rtol=0,
    atol=0,
)
case(
    "elementwise",
    "bfloat16",
    (_m.astype(BF16), _g.astype(BF16)),
    _fused(lambda m, g: (m * g) + m),
    tg.bfloat16,
    lambda m, g: (
        (m.astype(np.float32) * g.astype(np.float32)).astype(BF16).astype(np.float32)
        + m.astype(np.float32)
    ),
)


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_case(c: Case) -> None:
    check_case(c)


UNARY = ("neg", "abs", "square", "sqrt", "exp", "tanh", "sigmoid", "relu", "reciprocal")
BINARY = ("add", "sub", "mul", "div", "maximum", "minimum")
DTYPES = (tg.float32, tg.float32, tg.float16, tg.bfloat16)


@st.composite
def chains(draw: st.DrawFn) -> tuple[tg.Graph, dict[str, np.ndarray]]:
    """A graph whose output 0 is a random elementwise chain of inputs that broadcast
    (some of them scalars or size-1 axes, dtypes mixed) and whose output 1 is the same
    chain fused by `fuse_since`; feeds of small magnitude."""
    rank = draw(st.integers(0, 3))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    g = tg.Graph("chain")
    feeds, values = {}, []
    for k in range(draw(st.integers(1, 4))):
        own = tuple(d if draw(st.booleans()) else 1 for d in shape)
        own = own[draw(st.integers(0, len(own))) :] if k else shape  # input 0: the full shape
        dtype = draw(st.sampled_from(DTYPES))
        values.append(g.input(f"x{k}", own, dtype))
        rng = np.random.default_rng(draw(st.integers(0, 2**16)))
        feeds[f"x{k}"] = (rng.standard_normal(own) * 2).astype(dtype.to_numpy())
    first = g.next_id
    unread = set(range(len(values)))
    for _ in range(draw(st.integers(1, 7))):
        if draw(st.booleans()):
            k = draw(st.integers(0, len(values) - 1))
            values.append(getattr(tg, _API[draw(st.sampled_from(UNARY))])(values[k]))
            unread.discard(k)
        else:
            a, b = (draw(st.integers(0, len(values) - 1)) for _ in range(2))
            op = draw(st.sampled_from(BINARY))
            values.append(getattr(tg, _API[op])(values[a], values[b]))
            unread -= {a, b}
        unread.add(len(values) - 1)
    result = values[-1]
    for k in sorted(unread - {len(values) - 1}):  # every input and step is read
        result = result + values[k]
    g.output(result)
    g.output(fuse_since(result, first))
    return g, feeds


_API = {
    "neg": "negative",
    "abs": "abs",
    "square": "square",
    "sqrt": "sqrt",
    "exp": "exp",
    "tanh": "tanh",
    "sigmoid": "sigmoid",
    "relu": "relu",
    "reciprocal": "reciprocal",
    "add": "add",
    "sub": "subtract",
    "mul": "multiply",
    "div": "divide",
    "maximum": "maximum",
    "minimum": "minimum",
}


@settings(max_examples=40, deadline=None)
@given(chains())
def test_a_fused_chain_computes_the_chain_bit_for_bit_on_every_backend(case) -> None:
    g, feeds = case
    unfused, fused = (g.node(i) for i in g.outputs)
    assert fused.shape == unfused.shape and fused.dtype == unfused.dtype
    prog = tg.compile(g)
    verify_plan(prog.graph, prog.plan, prog.aliasing)
    reference = prog.run(feeds, backend="numpy")
    assert np.array_equal(reference[0], reference[1], equal_nan=True)
    arena = prog.run(feeds, backend="arena")
    assert all(np.array_equal(a, r, equal_nan=True) for a, r in zip(arena, reference, strict=True))
    ours, theirs = prog.run(feeds, backend="mlx")
    assert np.array_equal(ours, theirs, equal_nan=True)


def _update(fuse: bool) -> int:
    """The arena of (b1 * (m * 1.5) + (1 - b1) * g) + g * g, m and g (64, 64) products of
    small inputs, with the chain fused or not."""
    g = tg.Graph("update")
    a, b = g.input("a", (64, 4), tg.float32), g.input("b", (4, 64), tg.float32)
    m, grad = a @ b, tg.tanh(a @ b)
    first = g.next_id
    chain = 0.9 * (m * 1.5) + 0.1 * grad
    g.output((fuse_since(chain, first) if fuse else chain) + tg.square(grad))
    return tg.compile(g).plan.arena_size


def test_the_plan_writes_a_fused_update_over_its_operand() -> None:
    # g is read again after the chain (g * g), so unfused, (1 - b1) * g needs a buffer
    # of its size beside m and g: three at once. Fused and written over m: two.
    size, inputs = 64 * 64 * 4, 2 * 64 * 4 * 4
    assert _update(fuse=True) <= 2 * size + inputs
    assert _update(fuse=False) >= 3 * size


def test_a_chain_of_one_step_stays_as_it_is() -> None:
    g = tg.Graph("one")
    x = g.input("x", (3,), tg.float32)
    first = g.next_id
    y = tg.exp(x)
    assert fuse_since(y, first).id == y.id
    assert fuse_since(x, first).id == x.id


def test_the_fusion_model_sees_the_program_as_a_chain_of_primitives() -> None:
    # add(mul(x, broadcast(c)), y): c is three primitives below the output (add, mul and
    # the Broadcast of the scalar), and the lowering makes those three
    g = tg.Graph("model")
    x, y = g.input("x", (4, 4), tg.float32), g.input("y", (4, 4), tg.float32)
    c = g.input("c", (), tg.float32)
    node = g.node(g.add("elementwise", [x.id, c.id, y.id], {"program": "mul 0 1;add 3 2"}).id)
    assert program_chain(g, node) == (3, 3, 0)
    relu = g.node(g.add("elementwise", [x.id], {"program": "relu 0;neg 1"}).id)
    assert program_chain(g, relu) == (2, 2, 1)  # relu's lowering adds its 0


@pytest.mark.parametrize(
    ("program", "message"),
    [
        ("", "at least one step"),
        ("exp 0;;neg 1", "step 1 of the program 'exp 0;;neg 1' is empty"),
        (" ", "step 0 of the program ' ' is empty"),
        ("exp 0;log 0", "values \\[1\\] of the program"),
        ("mul 0 3", "reads a value of neither an input nor an earlier step"),
        ("sum 0", "'sum' is not an elementwise op without attributes"),
        ("gelu 0", "'gelu' is not an elementwise op without attributes"),
        ("frobnicate 0", "'frobnicate' is not an elementwise op"),
        ("add x 0", "operands must be ints"),
        ("add 0", "add takes 2 operands, not 1"),
    ],
)
def test_a_malformed_program_is_named(program: str, message: str) -> None:
    g = tg.Graph("bad")
    x = g.input("x", (2, 3), tg.float32)
    with pytest.raises(tg.ShapeError, match=message):
        g.add("elementwise", [x.id], {"program": program})


def test_under_mx_compile_a_fused_update_allocates_only_its_result() -> None:
    # AdamW's weight update, p - (c1 m) / (sqrt(v) c2 + c2): scratch.SCRATCH charges it
    # nothing (mx.compile fuses its six primitives into one kernel), which MLX's peak
    # must bear out; uncompiled (eager mode) its interior values are MLX temporaries.
    import mlx.core as mx

    from tensorgraph.codegen_mlx.lowering import lowering_of
    from tensorgraph.codegen_mlx.scratch import SCRATCH

    g = tg.Graph("update")
    p, m, v = (g.input(name, (256, 256), tg.float32) for name in "pmv")
    c1, c2 = g.input("c1", (), tg.float32), g.input("c2", (), tg.float32)
    program = "mul 1 3;sqrt 2;mul 6 4;add 7 4;div 5 8;sub 0 9"
    node = g.node(g.add("elementwise", [p.id, m.id, v.id, c1.id, c2.id], {"program": program}).id)
    assert SCRATCH["elementwise"](g, node) == 0
    rng = np.random.default_rng(0)
    shapes = [(256, 256)] * 3 + [(), ()]
    args = [mx.array(np.asarray(rng.random(s) + 0.5, np.float32)) for s in shapes]
    mx.eval(args)
    compiled = mx.compile(lambda *a: lowering_of(node)(node, a))
    mx.eval(compiled(*args))  # trace and warm
    mx.synchronize()
    mx.clear_cache()
    before = mx.get_active_memory()
    mx.reset_peak_memory()
    out = compiled(*args)
    mx.eval(out)
    assert mx.get_peak_memory() - before - node.nbytes <= 0
    from tensorgraph.runtime.kernels import evaluate

    np.testing.assert_array_equal(np.array(out), evaluate(node, [np.array(a) for a in args]))


def test_where_mlx_may_not_fuse_the_steps_before_the_last_are_charged(monkeypatch) -> None:
    from tensorgraph.codegen_mlx.scratch import SCRATCH

    g = tg.Graph("deep")
    x = g.input("x", (8, 8), tg.float32)
    program = ";".join(["exp 0"] + [f"tanh {k}" for k in range(1, 12)])  # 12 steps deep
    node = g.node(g.add("elementwise", [x.id], {"program": program}).id)
    assert SCRATCH["elementwise"](g, node) == 11 * 8 * 8 * 4
    shallow = g.node(g.add("elementwise", [x.id], {"program": "exp 0;tanh 1"}).id)
    assert SCRATCH["elementwise"](g, shallow) == 0
    monkeypatch.setenv("MLX_DISABLE_COMPILE", "1")
    assert SCRATCH["elementwise"](g, shallow) == 8 * 8 * 4
