"""run_mlx's pipelining options (what generate's pipelined decode loop uses): `wait`
False returns the same values as a waiting run, and still raises a device-guarded
precondition (a guard's verdict is waited for); `known` ranges skip only the host checks
they imply, so an index outside them is the same RunError, nothing run; a `known` entry
naming no input is a RunError naming it. `bind_feeds(bound=False)` leaves bound params
out but still refuses a missing unbound one."""

import mlx.core as mx
import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.codegen_mlx import run_mlx
from tensorgraph.errors import RunError
from tensorgraph.runtime.feeds import bind_feeds


def embedding(rows: int = 6) -> object:
    g = tg.Graph("embed")
    table = g.param(
        "table", (rows, 3), tg.float32, np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
    )
    ids = g.input("ids", (2,), tg.int32)
    g.output(tg.take(table, ids, 0) * 2.0)
    return tg.compile(g)


def test_not_waiting_gives_the_waited_values() -> None:
    prog = embedding()
    ids = mx.array(np.array([5, 1], np.int32))
    (waited,) = run_mlx(prog, {"ids": ids})
    (lazy,) = run_mlx(prog, {"ids": ids}, known={"ids": (0, 6)}, wait=False)
    assert isinstance(lazy, mx.array)
    np.testing.assert_array_equal(np.array(lazy), np.array(waited))
    np.testing.assert_array_equal(np.array(waited), np.arange(18).reshape(6, 3)[[5, 1]] * 2)


def test_known_ranges_too_wide_keep_the_check() -> None:
    prog = embedding(rows=6)
    bad = mx.array(np.array([6, 0], np.int32))  # 6 is past the table: [0, 8) implies nothing
    with pytest.raises(RunError, match=r"%\d+ take: index 6 is out of range for axis 0 of size 6"):
        run_mlx(prog, {"ids": bad}, known={"ids": (0, 8)}, wait=False)
    with pytest.raises(RunError, match=r"known range for 'token': the graph has no such input"):
        run_mlx(prog, {"ids": bad}, known={"token": (0, 6)})


def test_device_guarded_runs_wait_for_their_verdict() -> None:
    g = tg.Graph("slot")
    table = g.param("table", (10, 4))
    g.output(tg.take(table, g.param("slot", (2,), tg.int32), 0))
    prog = tg.compile(g)
    params = {"table": np.zeros((10, 4), np.float32), "slot": mx.array(np.array([2, 12], np.int32))}
    with pytest.raises(RunError, match=r"take: index 12 is out of range"):
        run_mlx(prog, {}, params, wait=False)


def test_bind_feeds_without_bound_params() -> None:
    g = tg.Graph("params")
    x = g.input("x", (2,), tg.float32)
    bound = g.param("b", (2,), tg.float32, np.ones(2, np.float32))
    free = g.param("w", (2,), tg.float32)
    g.output(x * bound + free)
    x_id, b_id, w_id = (n.id for n in g.nodes[:3])
    feeds = bind_feeds(
        g, {"x": np.zeros(2, np.float32)}, {"w": np.ones(2, np.float32)}, bound=False
    )
    assert sorted(feeds) == sorted([x_id, w_id])
    with_bound = bind_feeds(g, {"x": np.zeros(2, np.float32)}, {"w": np.ones(2, np.float32)})
    assert sorted(with_bound) == sorted([x_id, b_id, w_id])
    with pytest.raises(RunError, match=r"param 'w' is neither bound nor given"):
        bind_feeds(g, {"x": np.zeros(2, np.float32)}, bound=False)
