"""guards.py: which nodes pay a device check, and that the checks agree with the oracle.

A device check costs a sync, so the tiers matter: nodes whose operand cannot break the
precondition (by dtype, or as a compile-time value in range) must not be guarded, and
every node whose operand can must be, or a bad index would go unreported."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.codegen_mlx import executor
from tensorgraph.codegen_mlx.guards import device_guarded, guarded_nodes
from tensorgraph.ir.scatter import scatter_add


def guarded_ops(graph: tg.Graph) -> list[str]:
    return [node.op for node in guarded_nodes(graph)]


def test_indices_fed_at_run_time_are_guarded() -> None:
    g = tg.Graph("embed")
    table = g.param("table", (10, 4))
    g.output(tg.take(table, g.input("ids", (3,), tg.int32), 0))
    assert guarded_ops(g) == ["take"]


def test_strided_slicing_needs_no_device_check() -> None:
    # x[::2] gathers the constant positions [0, 2, 4], all inside the axis of 5.
    g = tg.Graph("slice")
    x = g.input("x", (5, 3))
    g.output(x[::2], x[:, ::-1])
    assert "take" in [n.op for n in g.nodes]
    assert guarded_ops(g) == []


def test_in_range_arange_and_full_indices_need_no_device_check() -> None:
    g = tg.Graph("gen")
    x = g.input("x", (4, 3))
    g.output(tg.take(x, tg.arange(g, 3, -5, -1), 0), tg.take(x, tg.full(g, (2,), -4), 0))
    assert guarded_ops(g) == []


def test_uint8_indices_into_a_long_axis_need_no_device_check() -> None:
    # uint8 holds 0..255: every value is a valid index of an axis of 256, not of 255.
    g = tg.Graph("u8")
    ids = g.input("ids", (3,), tg.uint8)
    long, short = g.input("long", (256, 2)), g.input("short", (255, 2))
    g.output(tg.take(long, ids, 0), tg.take(short, ids, 0))
    assert [n.inputs[0] for n in guarded_nodes(g)] == [short.id]


def test_empty_indices_need_no_device_check() -> None:
    g = tg.Graph("none")
    g.output(tg.take(g.input("x", (3,)), g.input("i", (0,), tg.int32), 0))
    assert guarded_ops(g) == []


def test_out_of_range_constant_indices_stay_guarded_and_raise() -> None:
    g = tg.Graph("const")
    x = g.input("x", (3, 2))
    g.output(tg.take(x, g.constant(np.array([1, 3], np.int32)), 0))
    assert guarded_ops(g) == ["take"]
    prog = tg.compile(g)
    for mode in ("auto", "eager", "compiled"):
        with pytest.raises(tg.RunError, match=r"%\d+ take: index 3 is out of range"):
            prog.run({"x": np.zeros((3, 2), np.float32)}, backend="mlx", mode=mode)


def test_only_integer_powers_with_signed_run_time_exponents_are_guarded() -> None:
    g = tg.Graph("pow")
    i = g.input("i", (2,), tg.int32)
    f = g.input("f", (2,), tg.float32)
    g.output(
        i**2,  # a constant exponent, >= 0
        tg.power(i, g.input("u", (2,), tg.uint8)),  # unsigned: never negative
        tg.power(f, f),  # floats have no precondition
        tg.power(i, g.input("e", (2,), tg.int8)),  # signed and fed: checked
    )
    assert guarded_ops(g) == ["pow"]
    assert guarded_nodes(g)[0].inputs[1] == g.nodes[-2].id


@given(
    st.integers(1, 6),
    st.lists(st.integers(-10, 10), min_size=1, max_size=5),
    st.sampled_from([tg.int8, tg.int32, tg.int64]),
)
def test_take_raises_exactly_where_the_reference_raises(size, indices, dtype) -> None:
    g = tg.Graph("take")
    x = g.input("x", (size, 2))
    g.output(tg.take(x, g.input("i", (len(indices),), dtype), 0))
    inputs = {
        "x": np.arange(size * 2, dtype=np.float32).reshape(size, 2),
        "i": np.array(indices, dtype.to_numpy()),
    }
    prog = tg.compile(g)
    bad = [i for i in indices if not -size <= i < size]
    for options in ({"backend": "numpy"}, {"mode": "eager"}, {"mode": "compiled"}):
        if bad:
            # The reference names the first bad index; MLX names the same one (argmax of
            # the bad mask picks the first True).
            pattern = rf"index {bad[0]} is out of range for axis 0 of size {size}"
            with pytest.raises(tg.RunError, match=pattern):
                prog.run(inputs, **options)
        else:
            (got,) = prog.run(inputs, **options)
            # Row i of arange(2 * size).reshape(size, 2) is [2i, 2i + 1] (i mod size).
            rows = [i % size for i in indices]
            expected = np.array([[2 * r, 2 * r + 1] for r in rows], np.float32)
            np.testing.assert_array_equal(got, expected)


def test_indices_computed_from_inputs_are_checked_on_the_host_not_the_device() -> None:
    # A token id or a position fed at run time is checked on the host before the run
    # (tier 3); indices read from a param, or computed from more than HOST_LIMIT
    # elements, are left to the device (tier 4).
    g = tg.Graph("embed")
    table = g.param("table", (10, 4))
    ids = g.input("ids", (3,), tg.int32)
    slot = g.param("slot", (2,), tg.int32)
    g.output(tg.take(table, ids + 1, 0), tg.take(table, slot, 0))
    assert guarded_ops(g) == ["take", "take"]
    assert [n.inputs[1] for n in device_guarded(g)] == [slot.id]


def test_device_guarded_indices_still_raise_in_every_mode() -> None:
    g = tg.Graph("slot")
    table = g.param("table", (10, 4))
    g.output(tg.take(table, g.param("slot", (2,), tg.int32), 0))
    prog = tg.compile(g)
    params = {"table": np.zeros((10, 4), np.float32), "slot": np.array([2, 12], np.int32)}
    for mode in ("auto", "eager", "compiled"):
        with pytest.raises(tg.RunError, match=r"take: index 12 is out of range"):
            prog.run({}, params, backend="mlx", mode=mode)


def test_the_first_broken_precondition_in_schedule_order_is_reported() -> None:
    # pow's exponent (device-guarded) breaks before take's index (host-checked) is read:
    # every backend names pow, as the oracle does, though the host check fails first.
    g = tg.Graph("order")
    base = g.input("base", (4, 2), tg.int32)
    table = tg.power(base, g.input("e", (4, 2), tg.int32))
    g.output(tg.take(table, g.input("ids", (1,), tg.int32), 0))
    prog = tg.compile(g)
    inputs = {
        "base": np.full((4, 2), 2, np.int32),
        "e": np.full((4, 2), -1, np.int32),
        "ids": np.array([9], np.int32),
    }
    with pytest.raises(tg.RunError) as oracle:
        prog.run(inputs, backend="numpy")
    assert "pow" in str(oracle.value)
    for mode in ("auto", "eager", "compiled"):
        with pytest.raises(tg.RunError) as caught:
            prog.run(inputs, backend="mlx", mode=mode)
        assert str(caught.value) == str(oracle.value)


def test_fed_indices_skip_the_device_replacement_pass_and_computed_ones_keep_it() -> None:
    # A take whose indices are an input is checked on the host before every run, so its
    # trace hands them to MLX as they are; indices computed from an input keep the pass
    # (MLX and NumPy could disagree on a computed value), as does a param's (tier 4).
    g = tg.Graph("embed")
    table = g.param("table", (5, 2))
    ids = g.input("ids", (3,), tg.int32)
    fed, computed = tg.take(table, ids, 0), tg.take(table, ids + 1, 0)
    slot = tg.take(table, g.param("slot", (1,), tg.int32), 0)
    g.output(fed, computed, slot)
    prog = tg.compile(g)
    assert executor._in_range(prog) == {fed.id}
    params = {"table": np.arange(10, dtype=np.float32).reshape(5, 2), "slot": np.array([4])}
    params["slot"] = params["slot"].astype(np.int32)
    inputs = {"ids": np.array([-5, 0, 3], np.int32)}  # negative indices count from the end
    want = prog.run(inputs, params, backend="numpy")
    for mode in ("auto", "eager", "compiled"):
        got = prog.run(inputs, params, backend="mlx", mode=mode)
        for a, b in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, b)
        with pytest.raises(tg.RunError, match=r"take: index 5 is out of range"):
            prog.run({"ids": np.array([0, 5, 1], np.int32)}, params, backend="mlx", mode=mode)


LAYOUTS = ("reshape", "broadcast_to", "transpose", "narrow")


@settings(max_examples=15)  # each example compiles and runs three executors
@given(
    st.lists(st.integers(-2, 6), min_size=1, max_size=6),
    st.lists(st.sampled_from(LAYOUTS), max_size=4),
)
def test_constant_indices_seen_through_layout_ops_are_checked_at_compile_time(
    values, chain
) -> None:
    # scatter_add's rows must lie in [0, 4). The rows are a constant rearranged by
    # reshape / broadcast_to / transpose / narrow (mirrored in NumPy as `kept`): every
    # row used is one of the constant's values, so the node needs no device check when
    # all the constant's values are in range; when a value the chain keeps is out of
    # range it stays guarded (narrow may drop the bad one: then checking the constant
    # is conservative), and every backend agrees either way.
    g = tg.Graph("rows")
    rows, kept = g.constant(np.array(values, np.int32)), np.array(values, np.int32)
    for op in chain:
        if op == "reshape":
            rows, kept = tg.reshape(rows, (1, -1)), kept.reshape(1, -1)
        elif op == "broadcast_to":
            shape = (2, *kept.shape)
            rows, kept = tg.broadcast_to(rows, shape), np.broadcast_to(kept, shape)
        elif op == "transpose":
            rows, kept = tg.transpose(rows, tuple(reversed(range(kept.ndim)))), kept.T
        elif kept.shape[-1] > 1:
            rows, kept = tg.narrow(rows, kept.ndim - 1, 1, kept.shape[-1] - 1), kept[..., 1:]
    rows, kept = tg.reshape(rows, (-1,)), kept.reshape(-1)
    target, update = g.input("target", (4,)), g.input("update", kept.shape)
    g.output(scatter_add(target, update, rows, 0))
    all_inside = bool(np.all((np.array(values) >= 0) & (np.array(values) < 4)))
    used_inside = bool(np.all((kept >= 0) & (kept < 4)))
    assert guarded_ops(g) == ([] if all_inside else ["scatter_add"])
    feeds = {"target": np.zeros(4, np.float32), "update": np.ones(kept.shape, np.float32)}
    program = tg.compile(g)
    for options in ({"backend": "numpy"}, {"mode": "auto"}, {"mode": "eager"}):
        if used_inside:
            (got,) = program.run(feeds, **options)
            # row r gets one per occurrence of r among the used rows
            np.testing.assert_array_equal(got, np.bincount(kept, minlength=4))
        else:
            with pytest.raises(tg.RunError, match=r"scatter_add: index -?\d+ is out of range"):
                program.run(feeds, **options)


def test_fed_indices_broadcast_past_the_host_limit_are_checked_on_the_host() -> None:
    # An embedding gradient's rows: token ids (small) broadcast over the width, more
    # elements than HOST_LIMIT. Broadcasting computes nothing, so the ids are checked on
    # the host before the run, and a bad one is the reference's RunError in every mode.
    from tensorgraph.runtime.state import HOST_LIMIT

    width = HOST_LIMIT // 4 + 1
    g = tg.Graph("embedding_gradient")
    ids = g.input("ids", (4,), tg.int32)
    rows = tg.broadcast_to(tg.reshape(ids, (4, 1)), (4, width))
    target, update = g.input("table", (6, width)), g.input("cotangent", (4, width))
    g.output(scatter_add(target, update, rows, 0))
    assert guarded_ops(g) == ["scatter_add"]
    assert device_guarded(g) == ()
    program = tg.compile(g)
    feeds = {
        "table": np.zeros((6, width), np.float32),
        "cotangent": np.ones((4, width), np.float32),
    }
    for options in (
        {"backend": "numpy"},
        {"mode": "auto"},
        {"mode": "eager"},
        {"mode": "compiled"},
    ):
        (got,) = program.run({**feeds, "ids": np.array([5, 0, 5, 2], np.int32)}, **options)
        expected = np.zeros((6, width), np.float32)
        expected[[0, 2]], expected[5] = 1, 2  # row 5 gets two rows of ones
        np.testing.assert_array_equal(got, expected)
        with pytest.raises(tg.RunError, match=r"scatter_add: index 6 is out of range"):
            program.run({**feeds, "ids": np.array([1, 6, 0, 7], np.int32)}, **options)


def test_indices_computed_from_bound_params_are_known_at_compile_time() -> None:
    # A training step normalises its position indices as where(i < 0, i + n, i) over
    # folded (bound) params: computed before the run, so no device check, and the step
    # can donate its states. Out of range (-17 + 8 = -9 < -8), it stays guarded.
    for ids, guarded in (([-1, 0, 5, -8], []), ([-17, 0, 5, 7], ["take"])):
        g = tg.Graph("positions")
        table = g.param("table", (8, 4))
        i = g.param("i", (4,), tg.int32, value=np.array(ids, np.int32))
        index = tg.where(i < 0, i + 8, i)
        g.output(tg.take(table, index, 0))
        assert guarded_ops(g) == guarded, ids
