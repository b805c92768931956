"""One test per MLX backend bug found by random testing, named after the hazard.

Expected values are derived by hand in the comments; the NumPy reference is run beside
them as the oracle the backend must match. Hazards that once crashed or hung the
process (a segfault in mx.slice_update or mx.take, zero-size reductions) run in a
subprocess with a timeout, so a regression fails the test instead of the test run.
"""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tensorgraph as tg

ROOT = Path(__file__).resolve().parents[2]
MODES = ("auto", "eager", "compiled")  # auto: the segmented default


def run_all(graph: tg.Graph, inputs: dict) -> list[list[np.ndarray]]:
    """The outputs on the NumPy reference, then on MLX eager and traced."""
    prog = tg.compile(graph)
    runs = [prog.run(inputs, backend="numpy")]
    return runs + [prog.run(inputs, backend="mlx", mode=mode) for mode in MODES]


def assert_all(graph: tg.Graph, inputs: dict, expected: list[np.ndarray]) -> None:
    """Every backend gives `expected`: shape, then dtype, then values (nan == nan)."""
    for outputs in run_all(graph, inputs):
        for got, want in zip(outputs, expected, strict=True):
            assert got.shape == want.shape
            assert got.dtype == want.dtype
            np.testing.assert_array_equal(got, want)


def assert_all_raise(graph: tg.Graph, inputs: dict, pattern: str) -> None:
    """The reference and both MLX modes raise the same RunError."""
    prog = tg.compile(graph)
    with pytest.raises(tg.RunError, match=pattern):
        prog.run(inputs, backend="numpy")
    for mode in MODES:
        with pytest.raises(tg.RunError, match=pattern):
            prog.run(inputs, backend="mlx", mode=mode)


def run_isolated(code: str, timeout: float = 60) -> str:
    """Run `code` in a fresh Python with the package importable; its stdout. Fails (not
    crashes, not hangs) on a signal, a non-zero exit or a timeout."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=ROOT,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung: no result within {timeout} s")
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-2000:]}"
    return done.stdout


# ---------------------------------------------------------------- 0-d arrays


def test_zero_d_inputs_and_outputs_keep_shape_unit() -> None:
    # np.ascontiguousarray made 0-d feeds 1-d: 3 * 2 came back as [6.] of shape (1,).
    g = tg.Graph("scalar")
    x = g.input("x", (), tg.float32)
    g.output(x * 2.0, tg.sum(x))
    assert_all(g, {"x": np.float32(3)}, [np.array(6, np.float32), np.array(3, np.float32)])


def test_take_with_a_0d_index_drops_the_axis() -> None:
    # x = [[0, 1], [2, 3], [4, 5]]; row 1 is [2, 3], shape (2,) (was (1, 2)).
    g = tg.Graph("take0d")
    x = g.input("x", (3, 2), tg.float32)
    i = g.input("i", (), tg.int32)
    g.output(tg.take(x, i, 0))
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(3, 2), "i": np.int32(1)}
    assert_all(g, feeds, [np.array([2, 3], np.float32)])


def test_take_of_a_0d_index_feeding_slice_update_does_not_crash() -> None:
    # take(x, 1, axis=1) of x = [[0, 1], [2, 3], [4, 5]] is column 1, [1, 3, 5]; written
    # into zeros(5) at 1 it gives [0, 1, 3, 5, 0]. MLX got the column as (3, 1) and
    # mx.slice_update segfaulted on the rank-2 update of a rank-1 target.
    out = run_isolated(
        """
        import numpy as np, tensorgraph as tg
        g = tg.Graph("crash")
        x = g.input("x", (3, 2), tg.float32)
        i = g.input("i", (), tg.int32)
        t = g.input("t", (5,), tg.float32)
        g.output(tg.slice_update(t, tg.take(x, i, 1), 0, 1))
        prog = tg.compile(g)
        feeds = {"x": np.arange(6, dtype=np.float32).reshape(3, 2), "i": np.int32(1),
                 "t": np.zeros(5, np.float32)}
        for mode in ("eager", "compiled"):
            print(prog.run(feeds, backend="mlx", mode=mode)[0].tolist())
        """
    )
    assert out.split("\n")[:2] == ["[0.0, 1.0, 3.0, 5.0, 0.0]"] * 2


def test_slice_update_refuses_an_update_of_another_rank() -> None:
    # Whatever produces it, a mis-ranked update is a RunError naming the node, never a
    # segfault (run isolated: before the fix this very call crashed the process).
    out = run_isolated(
        """
        import mlx.core as mx, tensorgraph as tg
        from tensorgraph.codegen_mlx import LOWERINGS
        g = tg.Graph("ranks")
        t, u = g.input("t", (5,)), g.input("u", (3,))
        node = g.node(tg.slice_update(t, u, 0, 1).id)
        try:
            LOWERINGS["slice_update"](node, [mx.zeros((5,)), mx.zeros((3, 1))])
        except tg.RunError as err:
            print(err)
        """
    )
    assert re.fullmatch(r"%\d+ slice_update: update \(3, 1\) cannot be written into .*\n", out)


# ---------------------------------------------------------------- zero-size inputs


def test_sum_and_mean_over_zero_size_axes_neither_hang_nor_read_garbage() -> None:
    # A sum over no elements is 0 and a mean 0/0 = nan, whatever the dtype. MLX read
    # uninitialised memory for multi-axis sums (-7.5e9 for 0; mean inf, then nan) and
    # hung on some of these: this very script never finished before the fix.
    out = run_isolated(
        """
        import mlx.core as mx, numpy as np, tensorgraph as tg
        for dtype in ("float32", "int32", "bool", "float16"):
            # Freed non-zero buffers go back to MLX's cache and hold garbage for the next
            # allocation (a fresh process's zeroed pages hid the bug now and then).
            mx.eval([mx.full((n,), 7.5) for n in (1, 3, 4, 64, 4096)])
            for shape, axes in (((2, 0, 3), (0, 1)), ((3, 0), (0, 1)), ((0,), 0)):
                g = tg.Graph("empty")
                x = g.input("x", shape, dtype)
                g.output(tg.sum(x, axes), tg.mean(x, axes))
                prog = tg.compile(g)
                feed = {"x": np.zeros(shape, tg.ir.as_dtype(dtype).to_numpy())}
                for mode in ("eager", "compiled") * 3:  # MLX's failures came and went
                    total, mean = prog.run(feed, backend="mlx", mode=mode)
                    assert (total == 0).all() and np.isnan(mean).all(), (dtype, shape, mode)
                    print(dtype, total.dtype, mean.dtype, total.shape)
        """
    )
    lines = out.splitlines()
    assert len(lines) == 4 * 3 * 6
    # bool sums count in int32; integer means are float32 (the registry's rules).
    assert lines[0] == "float32 float32 float32 (3,)"
    assert lines[18] == "int32 int32 float32 (3,)"
    assert lines[36] == "bool int32 float32 (3,)"
    assert lines[54] == "float16 float16 float16 (3,)"


def test_log_softmax_and_argmax_of_zero_size_inputs_are_empty() -> None:
    # (0, 3) has no rows: log_softmax is (0, 3), argmax over axis 1 is (0,) int32.
    g = tg.Graph("empty")
    x = g.input("x", (0, 3), tg.float32)
    g.output(tg.log_softmax(x, 0), tg.log_softmax(x, 1), tg.argmax(x, 1), tg.softmax(x, 0))
    empty = np.zeros((0, 3), np.float32)
    assert_all(g, {"x": empty}, [empty, empty, np.zeros((0,), np.int32), empty])


def test_matmul_over_an_empty_inner_axis_is_zeros() -> None:
    # Each element sums k = 0 products: 0.
    g = tg.Graph("mm")
    a, b = g.input("a", (2, 0)), g.input("b", (0, 3))
    g.output(a @ b)
    feeds = {"a": np.zeros((2, 0), np.float32), "b": np.zeros((0, 3), np.float32)}
    assert_all(g, feeds, [np.zeros((2, 3), np.float32)])


# ---------------------------------------------------------------- full and arange


def test_full_casts_its_value_like_numpy() -> None:
    # 2.7 -> int32 truncates to 2; 300 -> int8 wraps to 300 - 256 = 44; -7 -> uint8 wraps
    # to 256 - 7 = 249; any non-zero -> bool is True. (MLX's full gave float32 2.7 and
    # int32 ones, and raised ValueError for 300 in int8.)
    g = tg.Graph("full")
    g.output(
        tg.full(g, (3,), 2.7, dtype=tg.int32),
        tg.full(g, (2,), 1, dtype=tg.bool_),
        tg.full(g, (), 300, dtype=tg.int8),
        tg.full(g, (2,), -7, dtype=tg.uint8),
        tg.full(g, (0, 2), 1.5, dtype=tg.bool_),
    )
    expected = [
        np.array([2, 2, 2], np.int32),
        np.array([True, True]),
        np.array(44, np.int8),
        np.array([249, 249], np.uint8),
        np.zeros((0, 2), bool),
    ]
    assert_all(g, {}, expected)


def test_integer_arange_of_fractional_bounds_rounds_once_like_numpy() -> None:
    # 0.1 + 0.3 * i in float64: 0.1, 0.4, 0.7, 0.9999999999999999, 1.3, 1.6, 1.9,
    # truncated: 0, 0, 0, 0, 1, 1, 1 (float32 arithmetic would give 1.0 at i = 3).
    g = tg.Graph("arange")
    g.output(tg.arange(g, 0.1, 2.0, 0.3, dtype=tg.int32))
    assert_all(g, {}, [np.array([0, 0, 0, 0, 1, 1, 1], np.int32)])


# ---------------------------------------------------------------- RunErrors of the oracle


def take_graph() -> tg.Graph:
    """x (3, 2) gathered along axis 0 at two int32 indices i, both fed at run time."""
    g = tg.Graph("take")
    x = g.input("x", (3, 2), tg.float32)
    g.output(tg.take(x, g.input("i", (2,), tg.int32), 0))
    return g


def test_take_out_of_range_is_a_run_error() -> None:
    # Axis 0 has size 3: valid indices are -3..2. MLX returned zeros or garbage, and for
    # 2^31 - 1 crashed (its gather reads out of bounds), so MLX runs isolated.
    indices = (3, 5, -4, 2**31 - 1)
    for index in indices:
        inputs = {"x": np.ones((3, 2), np.float32), "i": np.array([0, index], np.int32)}
        with pytest.raises(tg.RunError, match=message(index, 3)):
            tg.compile(take_graph()).run(inputs, backend="numpy")
    out = run_isolated(
        f"""
        import numpy as np, tensorgraph as tg
        from tests.codegen_mlx.test_regressions import take_graph
        prog = tg.compile(take_graph())
        for index in {indices}:
            for mode in ("eager", "compiled"):
                inputs = {{"x": np.ones((3, 2), np.float32), "i": np.array([0, index], np.int32)}}
                try:
                    prog.run(inputs, backend="mlx", mode=mode)
                except tg.RunError as err:
                    print(err)
        """
    )
    lines = out.splitlines()
    assert len(lines) == 2 * len(indices)
    for line, index in zip(lines, [i for i in indices for _ in range(2)], strict=True):
        assert re.fullmatch(message(index, 3), line)


def message(index: int, size: int) -> str:
    """The reference's RunError for a bad take index (tensorgraph.runtime.kernels)."""
    return rf"%\d+ take: index {index} is out of range for axis 0 of size {size}"


def test_take_in_range_negative_indices_count_from_the_end() -> None:
    # -1 is row 2 = [4, 5]; -3 is row 0 = [0, 1].
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    inputs = {"x": x, "i": np.array([-1, -3], np.int32)}
    assert_all(take_graph(), inputs, [np.array([[4, 5], [0, 1]], np.float32)])


def test_integer_power_with_a_negative_exponent_is_a_run_error() -> None:
    # 2 ** -1 has no integer value; MLX returned 0.
    g = tg.Graph("pow")
    g.output(tg.power(g.input("a", (2,), tg.int32), g.input("b", (2,), tg.int32)))
    inputs = {"a": np.array([2, 3], np.int32), "b": np.array([2, -1], np.int32)}
    assert_all_raise(g, inputs, r"%\d+ pow: integer power with the negative exponent -1")


def test_integer_power_of_a_negative_constant_exponent_is_a_run_error() -> None:
    g = tg.Graph("pow")
    g.output(tg.power(g.input("a", (2,), tg.int32), -2))
    inputs = {"a": np.array([2, 3], np.int32)}
    assert_all_raise(g, inputs, r"%\d+ pow: integer power with the negative exponent -2")


# ---------------------------------------------------------------- pooling padding


def test_max_pool2d_pads_uint8_and_bool_with_their_lowest_value() -> None:
    # 4x4 input 0..15, kernel 3, stride 2, padding 1: the windows cover rows/cols
    # {-1..1, 1..3}, so the maxima are x[1,1] = 5, x[1,3] = 7, x[3,1] = 13, x[3,3] = 15.
    # Padding must be 0 for uint8 (was -128: a ValueError) and False for bool (was True).
    g = tg.Graph("pool")
    x = g.input("x", (1, 1, 4, 4), tg.uint8)
    b = g.input("b", (1, 1, 4, 4), tg.bool_)
    g.output(tg.max_pool2d(x, 3, 2, 1), tg.max_pool2d(b, 3, 2, 1))
    inputs = {
        "x": np.arange(16, dtype=np.uint8).reshape(1, 1, 4, 4),
        "b": np.zeros((1, 1, 4, 4), bool),
    }
    expected = [
        np.array([5, 7, 13, 15], np.uint8).reshape(1, 1, 2, 2),
        np.zeros((1, 1, 2, 2), bool),
    ]
    assert_all(g, inputs, expected)


# ---------------------------------------------------------------- integer contractions


def test_integer_matmul_and_conv2d_are_exact_and_wrap_like_numpy() -> None:
    # MLX has no integer matmul or conv (a raw ValueError). 65536 * 65536 = 2^32 wraps to
    # 0 in int32; [1, 2] . [3, 4] = 11. The conv: a 1x1x3x3 input of ones and a 2x2 kernel
    # of ones sums 4 ones per window: [[4, 4], [4, 4]].
    g = tg.Graph("int")
    a = g.input("a", (1, 2), tg.int32)
    b = g.input("b", (2, 1), tg.int32)
    x = g.input("x", (1, 1, 3, 3), tg.int8)
    w = g.input("w", (1, 1, 2, 2), tg.int8)
    g.output(a @ b, tg.conv2d(x, w))
    inputs = {
        "a": np.array([[65536, 1]], np.int32),
        "b": np.array([[65536], [11]], np.int32),
        "x": np.ones((1, 1, 3, 3), np.int8),
        "w": np.ones((1, 1, 2, 2), np.int8),
    }
    # 65536 * 65536 + 1 * 11 = 2^32 + 11 -> 11 in int32.
    expected = [np.array([[11]], np.int32), np.full((1, 1, 2, 2), 4, np.int8)]
    assert_all(g, inputs, expected)


# ---------------------------------------------------------------- float32 precision


def test_float32_matmul_runs_at_float32_precision() -> None:
    # With TF32 (a 10-bit mantissa: CUDA and M5 GPUs by default) a 256-term dot product
    # of values in [-1, 1] errs by ~1e-3 relative; float32 accumulation by ~1e-6.
    # tests/conftest.py sets MLX_ENABLE_TF32=0 so this holds on every device.
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (64, 256)).astype(np.float32)
    b = rng.uniform(-1, 1, (256, 64)).astype(np.float32)
    g = tg.Graph("mm")
    g.output(g.input("a", a.shape) @ g.input("b", b.shape))
    exact = a.astype(np.float64) @ b.astype(np.float64)
    for outputs in run_all(g, {"a": a, "b": b}):
        np.testing.assert_allclose(outputs[0], exact, rtol=1e-4, atol=1e-4)
