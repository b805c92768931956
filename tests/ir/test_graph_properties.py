"""Random graphs: the verifier accepts them, JSON round-trips exactly, printing is stable,
and the reference interpreter gives the declared shapes and dtypes."""

import numpy as np
from hypothesis import given

import tensorgraph as tg
from tensorgraph.ir.verify import verify
from tensorgraph.runtime.reference import run_reference
from tests.strategies import feeds, graphs


@given(graphs())
def test_verifier_accepts_built_graphs(graph: tg.Graph) -> None:
    verify(graph)


@given(graphs())
def test_json_round_trip_is_exact(graph: tg.Graph) -> None:
    _inputs, params = feeds(graph)
    if params:
        graph.bind("w", params["w"])
    again = tg.Graph.from_json(graph.to_json())
    assert again == graph
    assert str(again) == str(graph)
    assert again.to_json() == graph.to_json()


@given(graphs())
def test_printer_is_stable(graph: tg.Graph) -> None:
    text = str(graph)
    assert str(graph) == text
    assert len(text.splitlines()) == len(graph) + 2  # header, one line per node, return


@given(graphs())
def test_reference_outputs_have_declared_shapes_and_dtypes(graph: tg.Graph) -> None:
    inputs, params = feeds(graph)
    for node_id, value in zip(graph.outputs, run_reference(graph, inputs, params), strict=True):
        node = graph.node(node_id)
        assert value.shape == node.shape
        assert value.dtype == node.dtype.to_numpy()
        assert np.all(np.isfinite(value)), "the strategy promises finite values"


def test_constant_payloads_round_trip() -> None:
    g = tg.Graph("c")
    x = g.input("x", (3,), tg.bfloat16)
    g.output(x + g.constant(np.array([1.5, -2.0, 3.25]), tg.bfloat16), x * 2)
    again = tg.Graph.from_json(g.to_json())
    assert again == g
    const = next(n for n in again.nodes if n.op == "constant")
    assert isinstance(const.attr("value"), bytes)


def test_corrupted_json_raises_graph_error() -> None:
    g = tg.Graph("c")
    g.output(tg.exp(g.input("x", (2,))))
    text = g.to_json().replace('"exp"', '"exq"')
    try:
        tg.Graph.from_json(text)
    except tg.GraphError as err:
        assert "exq" in str(err)
    else:
        raise AssertionError("a corrupted graph was accepted")
