"""DCE drops what no output needs; view_alias makes chains of views share one buffer."""

import tensorgraph as tg
from tensorgraph.passes import dce
from tensorgraph.planner.aliasing import analyze_aliasing
from tensorgraph.planner.liveness import analyze


def test_dce_keeps_the_signature_and_what_outputs_need() -> None:
    g = tg.Graph()
    x, unused = g.input("x", (4,)), g.input("unused", (4,))
    tg.exp(x)  # dead
    g.output(tg.tanh(x))
    result = dce(g)
    assert result.stats["removed"] == 1
    assert [n.op for n in result.graph.nodes] == ["input", "input", "tanh"]
    assert dce(result.graph).graph is result.graph, "nothing left to do returns the input"
    assert unused.id in result.graph


def test_chain_of_views_resolves_to_one_root() -> None:
    g = tg.Graph()
    t = tg.exp(g.input("x", (4, 6)))
    v = t.reshape(24).reshape(2, 12)[1:2].astype(tg.float32)
    g.output(tg.tanh(v), v)
    aliasing = analyze_aliasing(g, None, ("view_alias",))
    assert aliasing.count("view") == 4
    live = analyze(g, None, aliasing)
    assert live.storage[v.id].root == t.id
    assert live.storage[v.id].offset == 12 * 4
    roots = {b.id for b in live.buffers}
    assert v.id not in roots and t.id in roots
    t_buffer = next(b for b in live.buffers if b.id == t.id)
    assert t_buffer.end == len(g), "an output view keeps its root to the end"


def test_view_alias_off_gives_views_their_own_buffers() -> None:
    g = tg.Graph()
    t = tg.exp(g.input("x", (4, 6)))
    g.output(tg.tanh(t.reshape(24)))
    with_views = tg.compile(g)
    without = tg.compile(g, passes=("dce", "cse", "reinplace"))
    assert len(without.plan.buffers) == len(with_views.plan.buffers) + 1
