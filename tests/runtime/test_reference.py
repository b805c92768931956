"""The reference interpreter and its two helpers: `bind_feeds` (checked inputs and
params) and `evaluate` (fresh, contiguous, exactly typed results). Outputs are copies in
output order, never aliases of a caller's array, a bound param or a constant."""

import weakref

import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.runtime import reference
from tensorgraph.runtime.feeds import bind_feeds
from tensorgraph.runtime.kernels import constant_value, evaluate
from tensorgraph.runtime.reference import run_reference

X = np.arange(6, dtype=np.float32).reshape(2, 3)
W = np.array([1.0, 2.0, 3.0], np.float32)


def _net() -> tuple[tg.Graph, tg.Tensor, tg.Tensor, tg.Tensor]:
    g = tg.Graph("net")
    x = g.input("x", (2, 3))
    w = g.param("w", (3,), value=W)
    b = g.param("b", (3,))
    return g, x, w, b


# ---------------------------------------------------------------- bind_feeds


def test_bind_feeds_gives_every_input_and_param_by_node_id() -> None:
    g, x, w, b = _net()
    bias = np.zeros(3, np.float32)
    feeds = bind_feeds(g, {"x": X}, {"b": bias})
    assert set(feeds) == {x.id, w.id, b.id}
    assert feeds[x.id] is X, "a caller's array is checked, not copied"
    assert feeds[b.id] is bias
    np.testing.assert_array_equal(feeds[w.id], W)


def test_given_params_override_bound_ones() -> None:
    g, _x, w, _b = _net()
    other = np.full(3, 7.0, np.float32)
    feeds = bind_feeds(g, {"x": X}, {"w": other, "b": W})
    assert feeds[w.id] is other
    np.testing.assert_array_equal(g.param_values["w"], W)


def test_python_data_is_converted_to_the_declared_dtype() -> None:
    g = tg.Graph()
    x = g.input("x", (2, 2), tg.float16)
    s = g.input("s", (), tg.int32)
    m = g.input("m", (2,), tg.bool_)
    z = g.input("z", (0,), tg.int32)
    feeds = bind_feeds(g, {"x": [[1, 2], [3.5, 4]], "s": 3, "m": [True, False], "z": []})
    assert feeds[x.id].dtype == np.float16 and feeds[s.id].dtype == np.int32
    np.testing.assert_array_equal(feeds[x.id], [[1, 2], [3.5, 4]])
    assert feeds[s.id] == 3 and feeds[m.id].tolist() == [True, False]
    assert feeds[z.id].shape == (0,)


def test_numpy_scalars_are_converted_only_exactly() -> None:
    g = tg.Graph()
    s = g.input("s", (), tg.float32)
    assert bind_feeds(g, {"s": np.float32(2.5)})[s.id] == 2.5
    exact = bind_feeds(g, {"s": np.float64(2.5)})[s.id]
    assert exact.dtype == np.float32 and exact == 2.5
    with pytest.raises(tg.RunError, match="input 's': expected dtype float32 but got float64"):
        bind_feeds(g, {"s": np.float64(0.1)})


def test_a_graph_without_inputs_binds_nothing() -> None:
    g = tg.Graph()
    g.output(tg.arange(g, 3))
    assert bind_feeds(g, {}) == {}
    np.testing.assert_array_equal(run_reference(g, {})[0], [0, 1, 2])


# ---------------------------------------------------------------- run_reference


def test_outputs_come_in_order_and_repeats_are_distinct_copies() -> None:
    g, x, w, b = _net()
    y = x * w + b
    g.output(y, x, y, w)
    bias = np.ones(3, np.float32)
    first, echo, again, weight = run_reference(g, {"x": X}, {"b": bias})
    np.testing.assert_array_equal(first, X * W + bias)
    np.testing.assert_array_equal(again, first)
    assert first is not again and not np.shares_memory(first, again)
    np.testing.assert_array_equal(echo, X)
    np.testing.assert_array_equal(weight, W)


def test_outputs_never_alias_inputs_params_or_constants() -> None:
    g, x, w, b = _net()
    c = g.constant(np.array([5.0, 6.0, 7.0], np.float32))
    g.output(x, w, b, c, x.reshape(3, 2), tg.narrow(x, 0, 1, 1), x.astype(tg.float32))
    x_value, bias = X.copy(), np.zeros(3, np.float32)
    outs = run_reference(g, {"x": x_value}, {"b": bias})
    for out in outs:
        assert out.flags.c_contiguous and out.flags.writeable and out.flags.owndata
        for source in (x_value, bias, g.param_values["w"]):
            assert not np.shares_memory(out, source)
        out[...] = -1
    np.testing.assert_array_equal(x_value, X)
    np.testing.assert_array_equal(bias, 0)
    np.testing.assert_array_equal(g.param_values["w"], W)
    np.testing.assert_array_equal(run_reference(g, {"x": X}, {"b": bias})[3], [5, 6, 7])


def test_inputs_are_never_written() -> None:
    g = tg.Graph()
    cache = g.input("cache", (4, 3))
    row = g.input("row", (1, 3))
    g.output(tg.slice_update(cache, row, 0, 2), tg.relu(cache))
    cache_value = -np.ones((4, 3), np.float32)
    updated, _ = run_reference(g, {"cache": cache_value, "row": np.ones((1, 3), np.float32)})
    np.testing.assert_array_equal(cache_value, -1)
    np.testing.assert_array_equal(updated[2], 1)


def test_strided_inputs_give_the_same_results() -> None:
    g = tg.Graph()
    x = g.input("x", (3, 2))
    g.output(x @ x.T, tg.sum(x, 0), x.reshape(6))
    strided = X.T
    assert not strided.flags.c_contiguous
    for got, want in zip(
        run_reference(g, {"x": strided}), run_reference(g, {"x": strided.copy()}), strict=True
    ):
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(run_reference(g, {"x": strided})[2], strided.reshape(6))


def test_an_operand_used_twice_and_a_dead_node() -> None:
    g = tg.Graph()
    x = g.input("x", (2, 3))
    tg.exp(x)  # dead: no output depends on it
    g.output(x * x)
    (out,) = run_reference(g, {"x": X})
    np.testing.assert_array_equal(out, X * X)


def test_values_are_dropped_after_their_last_reader(monkeypatch) -> None:
    g = tg.Graph()
    x = g.input("x", (64,))
    a = tg.exp(x)
    b = tg.tanh(a)
    c = tg.sin(b)
    g.output(tg.cos(c), a)
    results: dict[int, weakref.ref] = {}
    live_at: dict[int, set[int]] = {}

    def spying(node, args):
        live_at[node.id] = {i for i, ref in results.items() if ref() is not None}
        value = evaluate(node, args)
        results[node.id] = weakref.ref(value)
        return value

    monkeypatch.setattr(reference, "evaluate", spying)
    run_reference(g, {"x": np.zeros(64, np.float32)})
    last = g.nodes[-1].id
    assert b.id not in live_at[last], "b's last reader ran one step earlier"
    assert a.id in live_at[last], "a is an output and stays to the end"


# ---------------------------------------------------------------- evaluate and constants


def _copies_and_views(x: tg.Tensor) -> list[tg.Tensor]:
    """Ops that could hand back their argument's bytes, and ones whose result dtype differs."""
    return [
        x.reshape(6),
        x.astype(tg.float32),
        x.astype(tg.bfloat16),
        tg.narrow(x, 0, 1, 1),
        tg.narrow(x, 1, 0, 2),
        x.T,
        tg.broadcast_to(x, (4, 2, 3)),
        tg.concatenate([x]),
        tg.slice_update(x, x[:1], 0, 1),
        tg.argmax(x, 1),
        x.sum(),
    ]


def test_evaluate_returns_fresh_contiguous_exactly_typed_arrays() -> None:
    g = tg.Graph()
    x = g.input("x", (2, 3))
    for tensor in _copies_and_views(x):
        node = tensor.node
        args = [X if i == x.id else evaluate(g.node(i), [X]) for i in node.inputs]
        value = evaluate(node, args)
        assert value.shape == node.shape and value.dtype == node.dtype.to_numpy()
        assert value.flags.c_contiguous and value.flags.writeable
        assert not np.shares_memory(value, X), f"{node.op} aliases its argument"


def test_evaluate_refuses_boundary_nodes_by_name() -> None:
    g = tg.Graph()
    x = g.input("x", (2,))
    with pytest.raises(tg.RunError, match=r"%0 input 'x': no NumPy kernel for op 'input'"):
        evaluate(x.node, [])


def test_constant_value_decodes_the_payload_read_only() -> None:
    g = tg.Graph()
    payload = np.array([[1.5, -2.0]], np.float16)
    value = constant_value(g.constant(payload).node)
    assert value.dtype == np.float16 and value.shape == (1, 2)
    np.testing.assert_array_equal(value, payload)
    assert not value.flags.writeable
