"""Liveness lifetimes derived from first principles on hand-built graphs."""

import tensorgraph as tg
from tensorgraph.passes import view_alias
from tensorgraph.planner.liveness import analyze


def lifetimes(graph: tg.Graph, **options) -> dict[int, tuple[int, int, int]]:
    return {b.id: (b.size, b.start, b.end) for b in analyze(graph, **options).buffers}


def test_chain_lifetimes_are_half_open() -> None:
    g = tg.Graph()
    x = g.input("x", (4,))  # step 0
    a = tg.exp(x)  # step 1, read at 2
    b = tg.tanh(a)  # step 2, output
    g.output(b)
    assert lifetimes(g) == {x.id: (16, 0, 2), a.id: (16, 1, 3), b.id: (16, 2, 3)}


def test_diamond_keeps_the_shared_value_until_its_last_reader() -> None:
    g = tg.Graph()
    x = g.input("x", (2,))  # 0
    s = tg.exp(x)  # 1
    left = tg.tanh(s)  # 2
    right = tg.sin(s)  # 3
    g.output(left + right)  # 4
    live = lifetimes(g)
    assert live[s.id] == (8, 1, 4)
    assert live[left.id] == (8, 2, 5) and live[right.id] == (8, 3, 5)


def test_views_extend_their_root_and_own_no_buffer() -> None:
    g = tg.Graph()
    x = g.input("x", (2, 3))  # 0
    t = tg.exp(x)  # 1
    v = t.reshape(6)  # 2, a view once view_alias runs
    w = v.reshape(3, 2)  # 3, a view of a view
    u = tg.tanh(x)  # 4
    g.output(u, tg.sin(w))  # sin at 5
    aliased = view_alias(g).graph
    live = lifetimes(aliased)
    assert v.id not in live and w.id not in live
    assert live[t.id] == (24, 1, 6), "t lives until sin reads it through two views"
    assert lifetimes(g)[t.id] == (24, 1, 3), "without view_alias the reshape copies at 2"


def test_params_constants_and_tail_guard() -> None:
    g = tg.Graph()
    x = g.input("x", (4,))
    w = g.param("w", (4,))
    y = x * w + 1.0
    g.output(y)
    live = analyze(g)
    assert set(live.constants) == {w.id, next(n.id for n in g.nodes if n.op == "constant")}
    in_arena = analyze(g, params_in_arena=True)
    buffers = {b.id: b for b in in_arena.buffers}
    assert buffers[w.id].start == 0 and buffers[w.id].end == len(g)
    guarded = lifetimes(g, tail_guard=32)
    assert guarded[x.id][0] == 16 + 32 and guarded[y.id][0] == 16 + 32


def test_inplace_marks_merge_buffers() -> None:
    g = tg.Graph()
    x = g.input("x", (4,))
    a = tg.exp(x)  # 1
    b = tg.tanh(a)  # 2: will write in place of a
    g.output(b * 2.0)
    from tensorgraph.passes import reinplace

    marked = reinplace(g).graph
    live = analyze(marked)
    assert live.storage[b.id].root == a.id
    assert live.last_read[a.id] == len(g), "a's bytes now hold the output chain"
