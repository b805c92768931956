"""The node tuple and boundary lists a Graph keeps between appends are never stale:
after any sequence of appends interleaved with reads, each equals a fresh scan."""

from hypothesis import given
from hypothesis import strategies as st

import tensorgraph as tg

BOUNDARY = ("input", "param", "constant", "state")


def _scan(graph: tg.Graph, op: str) -> list:
    return [n for n in graph._nodes if n.op == op]  # what the kept lists must equal


@given(st.lists(st.sampled_from((*BOUNDARY, "add", "read")), min_size=1, max_size=30))
def test_kept_lists_follow_every_append(steps: list[str]) -> None:
    g = tg.Graph("kept")
    last = g.input("x0", (2,))
    for k, step in enumerate(steps):
        if step == "input":
            last = g.input(f"x{k + 1}", (2,))
        elif step == "param":
            last = g.param(f"w{k}", (2,))
        elif step == "constant":
            last = g.constant([1.0, 2.0], "float32")
        elif step == "state":
            last = g.state(f"s{k}", (2,))
        elif step == "add":
            last = last + last
        for op in BOUNDARY:  # read (and so keep) after every step, then compare
            assert g.boundary(op) == _scan(g, op)
        assert list(g.nodes) == g._nodes
        assert g.inputs == _scan(g, "input")
        assert g.params == _scan(g, "param")
        assert g.states == _scan(g, "state")


def test_boundary_list_is_the_callers_own() -> None:
    g = tg.Graph("own")
    x = g.input("x", (2,))
    g.output(x + x)
    g.inputs.clear()  # changing a returned list changes nothing the graph keeps
    assert [n.name for n in g.inputs] == ["x"]
