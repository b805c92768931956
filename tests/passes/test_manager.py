"""The pass manager: names, statistics, verification after every pass, no mutation."""

import pytest

import tensorgraph as tg
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import evolve
from tensorgraph.passes import manager
from tensorgraph.passes.result import PassResult


def small_graph() -> tg.Graph:
    g = tg.Graph("small")
    x = g.input("x", (4, 4))
    g.output(tg.tanh(tg.exp(x) + tg.exp(x)))
    return g


def test_unknown_pass_is_named() -> None:
    with pytest.raises(tg.GraphError, match=r"unknown pass\(es\) \['fuse'\]"):
        tg.compile(small_graph(), passes=("dce", "fuse"))


def test_stats_for_each_pass_and_switching_off() -> None:
    prog = tg.compile(small_graph())
    assert list(prog.stats) == ["dce", "cse", "view_alias", "reinplace"]
    assert prog.stats["cse"]["merged"] == 1
    for stats in prog.stats.values():
        assert "bytes_saved" in stats and "lower_bound" in stats
    off = tg.compile(small_graph(), passes=("dce", "view_alias"))
    assert list(off.stats) == ["dce", "view_alias"]
    assert "pass" in prog.report() or "passes" in prog.report()


def test_input_graph_is_not_mutated() -> None:
    g = small_graph()
    before = g.to_json()
    tg.compile(g)
    assert g.to_json() == before


def test_debug_names_the_pass_that_broke_an_invariant(monkeypatch) -> None:
    def broken(graph: Graph) -> PassResult:
        node = graph.nodes[-1]
        wrong = evolve(node, shape=(99,))
        nodes = [*graph.nodes[:-1], wrong]
        return PassResult(Graph.from_nodes(graph.name, nodes, graph.outputs), {})

    monkeypatch.setitem(manager.PASSES, "cse", broken)
    with pytest.raises(tg.ShapeError, match="after pass 'cse'"):
        tg.compile(small_graph(), debug=True)
