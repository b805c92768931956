"""Reinplacing: only where the operand's whole root dies, never into what must survive."""

import tensorgraph as tg
from tensorgraph.planner.aliasing import analyze_aliasing
from tensorgraph.planner.liveness import analyze
from tests.passes.test_pipeline_properties import assert_same
from tests.strategies import feeds

MIB = 1 << 20


def inplace_ops(prog: tg.Program) -> dict[int, int]:
    """node id -> operand index it overwrites."""
    return {
        i: prog.graph.node(i).inputs.index(a.source)
        for i, a in prog.aliasing.aliases.items()
        if a.kind == "inplace"
    }


def test_hazard_value_read_twice_is_overwritten_at_most_at_its_last_reader() -> None:
    # t = exp(x) used twice; w = exp(z); a = t + y; b = w + t; out = a * b.
    # The published bug: `a` reused t's buffer although `b` still reads t afterwards.
    g = tg.Graph("hazard")
    x, y, z = (g.input(n, (64, 64)) for n in "xyz")
    t = tg.exp(x)
    w = tg.exp(z)
    a = t + y
    b = w + t
    g.output(a * b)
    prog = tg.compile(g)
    reused = inplace_ops(prog)
    t_readers = [n.id for n in prog.graph.nodes if t.id in n.inputs]
    writes_into_t = [i for i, k in reused.items() if prog.graph.node(i).inputs[k] == t.id]
    assert len(writes_into_t) <= 1
    step = {n.id: s for s, n in enumerate(prog.graph.nodes)}
    for writer in writes_into_t:
        assert step[writer] == max(step[r] for r in t_readers), "overwrote t before its last read"
    assert a.id not in writes_into_t
    inputs, _ = feeds(g)
    expected = tg.compile(g, passes=()).run(inputs, backend="numpy")
    assert_same(prog.run(inputs, backend="arena"), expected)


def test_elementwise_chain_needs_one_tensor_plus_the_input() -> None:
    # x -> exp -> mul -> add -> tanh on 1 MiB tensors. x (an input) can't be overwritten
    # and lives [0, 2): born at step 0, last read by exp. exp's buffer then carries mul,
    # add and tanh in place to the end. Peak: x and exp's buffer together at exp's step:
    # 2 MiB. Scalar constants sit in the constant segment, not the arena.
    g = tg.Graph("chain")
    x = g.input("x", (512, 512))
    g.output(tg.tanh(tg.exp(x) * 2.0 + 1.0))
    prog = tg.compile(g)
    assert prog.stats["reinplace"]["reinplaced"] == 3  # mul, add and tanh
    assert prog.plan.arena_size == 2 * MIB
    without = tg.compile(g, passes=("dce", "cse", "view_alias"))
    assert without.plan.lower_bound == 2 * MIB  # exp and mul coexist at mul's step
    assert len(without.plan.buffers) == 5 and len(prog.plan.buffers) == 2
    inputs, _ = feeds(g)
    assert_same(prog.run(inputs, backend="arena"), without.run(inputs, backend="numpy"))


def _single_reuse(g: tg.Graph) -> dict[int, int]:
    """node id -> operand index it overwrites, for `g` in its own order."""
    aliasing = analyze_aliasing(g)
    return {
        i: g.node(i).inputs.index(a.source)
        for i, a in aliasing.aliases.items()
        if a.kind == "inplace"
    }


def test_dtype_changing_op_is_never_reinplaced() -> None:
    g = tg.Graph()
    x = g.input("x", (8, 8))
    e = tg.exp(x)
    g.output(e < 1.5)
    assert _single_reuse(g) == {}


def test_broadcasting_op_never_writes_into_the_smaller_operand() -> None:
    g = tg.Graph()
    small = tg.exp(g.input("row", (1, 16)))
    big = tg.exp(g.input("m", (8, 16)))
    out = small + big
    g.output(tg.tanh(out))
    reused = _single_reuse(g)
    assert reused.get(out.id) == 1, "may reuse the [8, 16] operand, never the [1, 16] one"


def test_graph_input_and_output_operands_are_never_overwritten() -> None:
    g = tg.Graph()
    x = g.input("x", (8, 8))
    y = tg.exp(x)  # reads the input x: must not write into it
    z = tg.tanh(y)  # y is an output: must not be overwritten
    g.output(y, z)
    assert _single_reuse(g) == {}


def test_operand_read_later_through_a_view_is_not_overwritten() -> None:
    g = tg.Graph()
    t = tg.exp(g.input("x", (4, 8)))
    flat = t.reshape(32)  # a view of t's buffer
    u = tg.tanh(t)  # t's own last direct read, but flat is read later
    g.output(u + flat.reshape(4, 8))
    reused = _single_reuse(g)
    assert u.id not in reused
    inputs, _ = feeds(g)
    want = tg.compile(g, passes=()).run(inputs, backend="numpy")
    assert_same(tg.compile(g).run(inputs, backend="arena"), want)


def test_narrow_view_at_an_offset_is_not_reused() -> None:
    g = tg.Graph()
    t = tg.exp(g.input("x", (4, 8)))
    lower = t[2:4]  # axis-0 narrow: a view at byte offset 64
    g.output(tg.tanh(lower))
    live = analyze(g, None, analyze_aliasing(g, None, ("view_alias",)))
    assert live.storage[lower.id].offset == 2 * 8 * 4
    assert _single_reuse(g) == {}


def test_slice_update_into_a_dying_cache_does_not_copy_it() -> None:
    g = tg.Graph("cache")
    cache = tg.zeros(g, (1, 4, 128, 32))  # 64 KiB, built in the graph, dies at the update
    step = g.input("k", (1, 4, 1, 32))
    updated = tg.slice_update(cache, tg.tanh(step), axis=2, start=5)
    g.output(updated.sum(axis=3))
    prog = tg.compile(g)
    assert inplace_ops(prog).get(updated.id) == 0
    cache_sized = [b for b in prog.plan.buffers if b.size == cache.nbytes]
    assert len(cache_sized) == 1, "the update must reuse the cache's buffer, not copy it"
    inputs, _ = feeds(g)
    assert_same(
        prog.run(inputs, backend="arena"), tg.compile(g, passes=()).run(inputs, backend="numpy")
    )
