"""Mutated buffers in exported programs become states (importers.torch_export): the
buffer's placeholder is `g.state(buffer name)`, its mutation `g.update_state`, so a value
written by one call is read by the next. Expected values are derived by hand from the
modules' arithmetic, in comments."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed")

import tensorgraph as tg  # noqa: E402
from tensorgraph.importers.torch_export import from_torch  # noqa: E402

BACKENDS = ("numpy", "arena", "mlx")


class Accumulator(torch.nn.Module):
    """total += x (a zero buffer), then returns total * 2."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.zeros(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.total.add_(x)
        return self.total * 2


class RowWriter(torch.nn.Module):
    """rows[at] = x (index_copy_ at a run-time position), returns the rows' sum."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("rows", torch.zeros(4, 2))

    def forward(self, x: torch.Tensor, at: torch.Tensor) -> torch.Tensor:
        self.rows.index_copy_(0, at, x)
        return self.rows.sum(0)


def test_a_mutated_buffer_is_a_state_carried_across_calls() -> None:
    graph = from_torch(Accumulator(), (torch.ones(3),))
    assert [s.name for s in graph.states] == ["total"]
    assert set(graph.state_updates) == {"total"}
    prog = tg.compile(graph)
    for backend in BACKENDS:
        state = prog.new_state(backend)
        # total: 0 -> [1, 2, 3] -> [2, 4, 6]; outputs are twice those.
        (first,) = prog.run({"x": np.array([1, 2, 3], np.float32)}, backend=backend, state=state)
        (second,) = prog.run({"x": np.array([1, 2, 3], np.float32)}, backend=backend, state=state)
        np.testing.assert_array_equal(first, [2, 4, 6], err_msg=backend)
        np.testing.assert_array_equal(second, [4, 8, 12], err_msg=backend)
        np.testing.assert_array_equal(state["total"], [2, 4, 6], err_msg=backend)


def test_index_copy_into_a_buffer_writes_the_state_rows() -> None:
    example = (torch.ones(1, 2), torch.tensor([0]))
    prog = tg.compile(from_torch(RowWriter(), example))
    for backend in BACKENDS:
        state = prog.new_state(backend)
        prog.run(
            {"x": np.array([[1, 2]], np.float32), "at": np.array([3])}, backend=backend, state=state
        )
        (total,) = prog.run(
            {"x": np.array([[5, 7]], np.float32), "at": np.array([1])}, backend=backend, state=state
        )
        # rows 3 then 1 written: [[0,0],[5,7],[0,0],[1,2]], column sums [6, 9].
        np.testing.assert_array_equal(total, [6, 9], err_msg=backend)
        np.testing.assert_array_equal(state["rows"], [[0, 0], [5, 7], [0, 0], [1, 2]])


def test_a_buffer_that_is_not_zero_cannot_be_a_state() -> None:
    module = Accumulator()
    module.total.fill_(1.0)
    with pytest.raises(tg.GraphError, match=r"mutated buffer 'total' is not all zeros"):
        from_torch(module, (torch.ones(3),))


class InputMutator(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        return x + 1


def test_a_mutated_user_input_is_a_listed_problem() -> None:
    with pytest.raises(tg.GraphError, match=r"user_input_mutation of 'x'"):
        from_torch(InputMutator(), (torch.ones(3),))
