"""Liveness on hand-built graphs, lifetimes derived from first principles, and on random
graphs against a brute-force oracle written from the definition.

Views and in-place writes are given by hand as an `Aliasing` so the analysis is tested
apart from the alias analysis that later asks it for decisions."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.ir.ops import OPS, workspace_bytes
from tensorgraph.planner.aliasing import Alias, Aliasing, analyze_aliasing
from tensorgraph.planner.liveness import NO_ALIASING, Storage, WorkspaceId, analyze
from tests.strategies import graphs

Marked = tuple[tg.Graph, Aliasing]


def marked(graph: tg.Graph, views: tuple = (), inplace: dict | None = None) -> Marked:
    """`graph` with `views` (tensors) as views of their input and `inplace` {tensor: k}
    written over operand k, as a hand-made aliasing."""
    aliases = {}
    for t in views:
        node = graph.node(t.id)
        source = graph.node(node.inputs[0])
        from tensorgraph.ir.ops import view_offset

        extra = view_offset(node.op, node.attr_dict, source.shape, node.dtype, source.dtype)
        aliases[t.id] = Alias(source.id, extra if extra is not None else 0, "view")
    for t, k in (inplace or {}).items():
        aliases[t.id] = Alias(graph.node(t.id).inputs[k], 0, "inplace")
    return graph, Aliasing(aliases)


def live_of(subject: tg.Graph | Marked, **options) -> object:
    graph, aliasing = subject if isinstance(subject, tuple) else (subject, NO_ALIASING)
    return analyze(graph, None, aliasing, **options)


def lifetimes(subject: tg.Graph | Marked, **options) -> dict[int, tuple[int, int, int]]:
    """buffer id -> (size, start, end)."""
    return {b.id: (b.size, b.start, b.end) for b in live_of(subject, **options).buffers}


# ---------------------------------------------------------------- plain graphs


def test_chain_lifetimes_are_half_open() -> None:
    g = tg.Graph()
    x = g.input("x", (4,))  # step 0, read at 1
    a = tg.exp(x)  # step 1, read at 2
    b = tg.tanh(a)  # step 2, output
    g.output(b)
    live = live_of(g)
    assert lifetimes(g) == {x.id: (16, 0, 2), a.id: (16, 1, 3), b.id: (16, 2, 3)}
    assert live.steps == (x.id, a.id, b.id)
    assert dict(live.last_use) == {x.id: 1, a.id: 2, b.id: 3}
    assert dict(live.last_read) == {x.id: 1, a.id: 2, b.id: 3}
    assert live.constants == ()


def test_diamond_keeps_the_shared_value_until_its_last_reader() -> None:
    g = tg.Graph()
    x = g.input("x", (2,))  # 0
    s = tg.exp(x)  # 1
    left = tg.tanh(s)  # 2
    right = tg.sin(s)  # 3
    g.output(left + right)  # 4
    live = lifetimes(g)
    assert live[x.id] == (8, 0, 2)
    assert live[s.id] == (8, 1, 4), "read at 2 and 3: alive through 3"
    assert live[left.id] == (8, 2, 5) and live[right.id] == (8, 3, 5)


def test_a_value_never_read_and_not_an_output_lives_one_step() -> None:
    g = tg.Graph()
    x = g.input("x", (3,))  # 0
    dead = tg.exp(x)  # 1
    g.output(tg.tanh(x))  # 2
    assert lifetimes(g)[dead.id] == (12, 1, 2)
    assert live_of(g).last_use[dead.id] == -1


def test_inputs_are_born_at_step_zero_wherever_they_are_declared() -> None:
    g = tg.Graph()
    x = g.input("x", (2,))  # 0
    a = tg.exp(x)  # 1
    y = g.input("y", (2,))  # 2, but written before the first step runs
    b = a + y  # 3
    g.output(tg.tanh(b))  # 4
    assert lifetimes(g)[y.id] == (8, 0, 4)


def test_peak_step_and_live_at() -> None:
    g = tg.Graph()
    x = g.input("x", (2,))  # 0: 8 B, read at 1
    big = tg.broadcast_to(x, (100, 2))  # 1: 800 B, read at 2
    s = big.sum(axis=0)  # 2: 8 B, read at 3
    out = tg.tanh(s)  # 3
    g.output(out)
    live = live_of(g)
    # live bytes per step: 8, 8 + 800, 800 + 8, 8 + 8
    assert live.live_bytes() == [8, 808, 808, 16]
    assert live.peak_step() == 1, "the first of the tied maxima"
    assert {b.id for b in live.live_at(1)} == {x.id, big.id}
    assert {b.id for b in live.live_at(3)} == {s.id, out.id}


# ---------------------------------------------------------------- views


def test_views_of_views_extend_the_root_and_own_no_buffer() -> None:
    g = tg.Graph()
    x = g.input("x", (2, 3))  # 0
    t = tg.exp(x)  # 1: 24 B
    v = t.reshape(6)  # 2: view at offset 0
    w = tg.narrow(v, 0, 2, 3)  # 3: view of a view, 2 floats in: offset 8
    u = tg.tanh(x)  # 4
    s = tg.sin(w)  # 5: the last read of t's bytes
    g.output(u, s)
    aliased = marked(g, views=(v, w))
    live = live_of(aliased)
    assert live.storage[v.id] == Storage(t.id, 0)
    assert live.storage[w.id] == Storage(t.id, 8)
    buffers = lifetimes(aliased)
    assert v.id not in buffers and w.id not in buffers
    assert buffers[t.id] == (24, 1, 6), "t lives until sin reads it through two views"
    assert live.last_use[t.id] == 2 and live.last_use[v.id] == 3 and live.last_use[w.id] == 5
    assert live.last_read[t.id] == 5
    assert lifetimes(g)[t.id] == (24, 1, 3), "unmarked, the reshape copies t at step 2"


def test_an_output_view_keeps_its_root_to_the_end() -> None:
    g = tg.Graph()
    x = g.input("x", (2, 3))  # 0
    t = tg.exp(x)  # 1
    v = t.reshape(6)  # 2: a view, and an output
    u = tg.tanh(x)  # 3
    g.output(v, u)
    aliased = marked(g, views=(v,))
    live = live_of(aliased)
    assert lifetimes(aliased)[t.id] == (24, 1, 4)
    assert live.last_read[t.id] == len(g) and live.last_use[v.id] == len(g)
    guarded = lifetimes(aliased, tail_guard=8)
    assert guarded[t.id] == (24 + 8, 1, 4), "t's bytes hold an output: guarded"


def test_a_view_of_a_param_stays_in_the_constant_segment() -> None:
    g = tg.Graph()
    x = g.input("x", (6,))
    w = g.param("w", (2, 3))
    flat = w.reshape(6)
    g.output(x * flat)
    aliased = marked(g, views=(flat,))
    live = live_of(aliased)
    assert live.constants == (w.id,)
    assert live.storage[flat.id] == Storage(w.id, 0)
    assert {b.id for b in live.buffers} == {x.id, g.outputs[0]}


# ---------------------------------------------------------------- boundary values


def test_params_and_constants_go_to_the_constant_segment_or_live_all_run() -> None:
    g = tg.Graph()
    x = g.input("x", (4,))  # 0
    w = g.param("w", (4,))  # 1
    xw = x * w  # 2
    y = xw + 1.0  # constant at 3, add at 4
    g.output(y)
    one = next(n.id for n in g.nodes if n.op == "constant")
    live = live_of(g)
    assert live.constants == (w.id, one)
    assert {b.id for b in live.buffers} == {x.id, xw.id, y.id}
    in_arena = lifetimes(g, params_in_arena=True)
    assert in_arena[w.id] == (16, 0, len(g)), "loaded once, kept for every run"
    assert in_arena[one] == (4, 0, len(g))
    assert live_of(g, params_in_arena=True).constants == ()


def test_tail_guard_grows_inputs_and_outputs_only() -> None:
    g = tg.Graph()
    x = g.input("x", (4,))
    w = g.param("w", (4,))
    mid = tg.exp(x * w)
    y = tg.tanh(mid)
    g.output(y)
    plain = lifetimes(g, params_in_arena=True)
    guarded = lifetimes(g, params_in_arena=True, tail_guard=32)
    grown = {i for i in plain if guarded[i][0] != plain[i][0]}
    assert grown == {x.id, y.id}
    assert guarded[x.id][0] == 16 + 32 and guarded[y.id][0] == 16 + 32
    assert guarded[w.id] == plain[w.id] and guarded[mid.id] == plain[mid.id]


# ---------------------------------------------------------------- in place


def test_an_inplace_chain_merges_into_one_buffer() -> None:
    g = tg.Graph()
    x = g.input("x", (4,))  # 0
    a = tg.exp(x)  # 1: the root
    b = tg.tanh(a)  # 2: into a
    c = tg.sin(b)  # 3: into b, so into a
    d = c * x  # 4: into c, so into a; an output
    g.output(d)
    chained = marked(g, inplace={b: 0, c: 0, d: 0})
    live = live_of(chained)
    assert {n: live.storage[n].root for n in (a.id, b.id, c.id, d.id)} == dict.fromkeys(
        (a.id, b.id, c.id, d.id), a.id
    )
    assert lifetimes(chained) == {x.id: (16, 0, 5), a.id: (16, 1, 5)}
    assert [live.last_use[n] for n in (a.id, b.id, c.id, d.id)] == [2, 3, 4, 5]
    assert live.last_read[a.id] == len(g)


def test_last_read_follows_an_inplace_successor_and_its_readers() -> None:
    g = tg.Graph()
    x = g.input("x", (4,))  # 0
    a = tg.exp(x)  # 1
    b = tg.tanh(a)  # 2: into a
    c = tg.sin(b)  # 3: reads b, so a's bytes
    g.output(tg.cos(c))  # 4
    live = live_of(marked(g, inplace={b: 0}))
    assert live.last_read[a.id] == 3, "a's root dies at step 3, where sin may reuse it"
    assert live.last_use[a.id] == 2


def test_hazard_later_reader_through_a_view_keeps_the_root_alive() -> None:
    # The published reinplace bug: `a` overwritten at its last *direct* read although a
    # later node still reads it (here through a view). last_read must see that read.
    g = tg.Graph()
    x = g.input("x", (2, 2))  # 0
    a = tg.exp(x)  # 1
    v = a.reshape(4)  # 2: view of a
    b = tg.tanh(a)  # 3: the last direct read of a
    c = tg.sin(v)  # 4: reads a's bytes later
    g.output(b, c)
    live = live_of(marked(g, views=(v,)))
    assert live.last_use[a.id] == 3
    assert live.last_read[a.id] == 4, "a's whole root dies at step 4, not at 3"


def test_inplace_into_a_param_is_refused() -> None:
    g = tg.Graph()
    x = g.input("x", (4,))
    w = g.param("w", (4,))
    y = w * x
    g.output(y)
    bad = marked(g, inplace={y: 0})
    with pytest.raises(tg.PlanError, match=rf"%{y.id} mul: .*%{w.id} param 'w'"):
        live_of(bad)


# ---------------------------------------------------------------- bad input


def test_negative_tail_guard_is_refused() -> None:
    g = tg.Graph()
    g.output(tg.exp(g.input("x", (2,))))
    with pytest.raises(tg.PlanError, match="tail_guard must be an integer >= 0 but got -1"):
        live_of(g, tail_guard=-1)


def test_a_view_mark_on_a_copy_is_refused() -> None:
    g = tg.Graph()
    x = g.input("x", (2, 3))
    t = x.T
    g.output(tg.exp(t))
    bad = (g, Aliasing({t.id: Alias(x.id, 0, "view")}))
    with pytest.raises(tg.PlanError, match=rf"%{t.id} transpose: .* is not a view"):
        live_of(bad)


def test_a_node_before_its_input_is_refused() -> None:
    g = tg.Graph()
    x = g.input("x", (2,))
    y = tg.exp(x)
    g.output(y)
    backwards = tg.Graph.from_nodes("backwards", list(reversed(g.nodes)), g.outputs)
    with pytest.raises(tg.GraphError, match=rf"%{y.id} exp: input %{x.id} is not computed"):
        live_of(backwards)


# ---------------------------------------------------------------- random graphs


def brute_force(
    graph: tg.Graph, aliasing: Aliasing, params_in_arena: bool
) -> dict[int, tuple[int, int, int]]:
    """Buffers from the definition, quadratic and sharing no code with `analyze`: follow
    the aliases to each node's root; a root lives from its birth to one past the last step
    at which any node mapped to it is defined or read, or to the end if one is an output.
    A node declaring workspace bytes has a workspace buffer live during its step only."""
    order = [n.id for n in graph.nodes]
    step = {n: s for s, n in enumerate(order)}

    def root(node_id: int) -> int:
        alias = aliasing.aliases.get(node_id)
        return node_id if alias is None else root(alias.source)

    buffers = {}
    for r in {root(n) for n in order}:
        node = graph.node(r)
        loaded_once = node.op in ("param", "constant")
        if loaded_once and not params_in_arena:
            continue
        members = [n for n in order if root(n) == r]
        uses = [step[m] for m in members]
        uses += [step[u.id] for u in graph.nodes if any(root(i) == r for i in u.inputs)]
        end = (
            len(order) if loaded_once or any(root(o) == r for o in graph.outputs) else max(uses) + 1
        )
        buffers[r] = (node.nbytes, 0 if OPS[node.op].boundary else step[r], end)
    for node in graph.nodes:
        if workspace_bytes(node, graph) > 0:
            at = step[node.id]
            buffers[WorkspaceId(node.id)] = (workspace_bytes(node, graph), at, at + 1)
    return buffers


PIPELINES = ((), ("view_alias",), ("view_alias", "reinplace"))  # unmarked, views, both


@settings(max_examples=100)
@given(graphs(), st.booleans(), st.sampled_from(PIPELINES))
def test_random_graphs_match_the_brute_force_definition(graph, params_in_arena, passes) -> None:
    rewritten = graph
    aliasing = analyze_aliasing(graph, None, passes)
    live = live_of((graph, aliasing), params_in_arena=params_in_arena)
    assert lifetimes((graph, aliasing), params_in_arena=params_in_arena) == brute_force(
        graph, aliasing, params_in_arena
    )
    for node in rewritten.nodes:
        where = live.storage[node.id]
        assert where.offset + node.nbytes <= rewritten.node(where.root).nbytes
