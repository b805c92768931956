"""torch.export's dynamic dimensions imported as tg.Dims (importers.sym_sizes): the
suite's GPT-2 and BERT with a dynamic sequence length, compiled once to a parametric
Program, against torch at both ends of the range and inside it; a hand-written module
with two dims and size arithmetic (view by `s * 2`, a slice to `s`, arange(s)) at random
lengths; and the unbounded dim, a listed problem."""

from __future__ import annotations

import operator

import numpy as np
import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="the torch extra is not installed")

import tensorgraph as tg  # noqa: E402
from tensorgraph.importers.torch_export import from_exported  # noqa: E402
from tensorgraph.ir.dims import Dim, evaluate  # noqa: E402
from tests.models_suite.catalog import build  # noqa: E402

MAX_SEQ = 256
LENGTHS = (1, 37, MAX_SEQ)


class _Reshaping(torch.nn.Module):
    """Two dynamic dims and size arithmetic on them: `view(b, s * 2, -1)`, a slice of
    the first `s` rows of the `2 * s`, and `arange(s)`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        y = (x.view(b, s * 2, -1) * 2).sum(-1)
        return y[:, :s] + torch.arange(s, dtype=x.dtype)


@pytest.fixture(scope="module", params=["gpt2", "bert"])
def imported(request: pytest.FixtureRequest) -> tuple:
    module, (tokens,) = build(request.param)
    seq = torch.export.Dim("seq", min=1, max=MAX_SEQ)
    graph = tg.from_torch(module, (tokens,), dynamic_shapes=(({1: seq},),))
    return module, graph, tg.compile(graph)


def test_dynamic_sequence_is_a_dim_of_the_users_name_and_range(imported: tuple) -> None:
    _, graph, prog = imported
    (tokens,) = [n for n in graph.nodes if n.op == "input"]
    assert tokens.shape == (1, Dim("seq", 1, MAX_SEQ))
    assert prog.plan.at(seq=MAX_SEQ).arena_size >= prog.plan.at(seq=1).arena_size


@pytest.mark.parametrize("length", LENGTHS)
def test_text_model_matches_torch_at_every_length(imported: tuple, length: int) -> None:
    module, _, prog = imported
    ids = torch.randint(0, 1000, (1, length), generator=torch.Generator().manual_seed(length))
    with torch.no_grad():
        expected = module(ids).numpy()
    feeds = {"args_0": ids.numpy()}
    for backend in ("numpy", "arena", "mlx"):
        (got,) = prog.run(feeds, backend=backend)
        assert got.shape == expected.shape, backend
        assert got.dtype == expected.dtype, backend
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4, err_msg=backend)


def test_arena_equals_the_static_import_bit_for_bit(imported: tuple) -> None:
    module, _, prog = imported
    length = 37
    ids = torch.randint(0, 1000, (1, length), generator=torch.Generator().manual_seed(7))
    static = tg.compile(tg.from_torch(module, (ids,)))
    feeds = {"args_0": ids.numpy()}
    (got,), (expected,) = prog.run(feeds, backend="arena"), static.run(feeds, backend="arena")
    assert np.array_equal(got, expected)


@pytest.mark.parametrize("length", (1, 2, 37, 122, MAX_SEQ))
def test_the_parametric_arena_is_within_issue_26s_5_percent_of_the_static_plan(
    imported: tuple, length: int
) -> None:
    """Issue 26's target: at each length the parametric arena is at most 1.05x the arena
    of a static compile of the same graph at that length, and never above the plan at the
    max. (GPT-2's was 1.077x at seq 1..122 while greedy plans at short lengths oriented
    it: tensorgraph/planner/parametric_build.py, CANDIDATE_PLANNER.)"""
    _, graph, prog = imported
    static = tg.compile(graph.specialize(seq=length))
    at = prog.plan.at(seq=length)
    assert at.lower_bound <= at.arena_size <= prog.plan.upper.arena_size
    assert at.arena_size <= 1.05 * static.plan.arena_size


@pytest.fixture(scope="module")
def reshaping() -> tg.Program:
    batch = torch.export.Dim("batch", min=1, max=8)
    seq = torch.export.Dim("seq", min=1, max=64)
    graph = tg.from_torch(
        _Reshaping(), (torch.randn(2, 3, 4),), dynamic_shapes=({0: batch, 1: seq},)
    )
    return tg.compile(graph)


def test_size_arithmetic_maps_to_extents(reshaping: tg.Program) -> None:
    batch, seq = Dim("batch", 1, 8), Dim("seq", 1, 64)
    shapes = {n.op: n.shape for n in reshaping.graph.nodes}
    assert shapes["input"] == (batch, seq, 4)
    assert shapes["reshape"] == (batch, 2 * seq, 2)
    assert reshaping.graph.nodes[-1].shape == (batch, seq)


@settings(max_examples=8)
@given(batch=st.integers(1, 8), seq=st.integers(1, 64))
def test_two_dims_match_torch_at_random_lengths(
    reshaping: tg.Program, batch: int, seq: int
) -> None:
    x = np.random.default_rng(batch * 100 + seq).standard_normal((batch, seq, 4), np.float32)
    expected = _Reshaping()(torch.from_numpy(x)).numpy()
    for backend in ("numpy", "arena"):
        (got,) = reshaping.run({"x": x}, backend=backend)
        assert got.shape == expected.shape == (batch, seq)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=backend)


def test_a_dim_without_upper_bound_is_a_listed_problem() -> None:
    unbounded = torch.export.Dim("tokens", min=1)
    with pytest.raises(tg.GraphError, match=r"'tokens'.*no upper bound.*max="):
        tg.from_torch(_Reshaping(), (torch.randn(2, 3, 4),), dynamic_shapes=({1: unbounded},))


def test_torch_size_expressions_become_extents_of_the_dims() -> None:
    from torch.utils._sympy.functions import FloorDiv, PythonMod

    from tensorgraph.importers.sym_sizes import SIZE_OPS, active, to_extent

    s0 = sympy.Symbol("s0", integer=True, positive=True)
    seq = Dim("seq", 1, 64)
    with active({s0: seq}):
        extent = to_extent(FloorDiv(3 * s0, 2) + PythonMod(s0, 4) - 1)
        assert to_extent(sympy.Symbol("u0", integer=True)) is None
    floordiv = SIZE_OPS[operator.floordiv](seq * 5, 3)
    for value in range(seq.min, seq.max + 1):
        assert evaluate(extent, {seq: value}) == (3 * value) // 2 + value % 4 - 1
        assert evaluate(floordiv, {seq: value}) == (value * 5) // 3


class _SizeValues(torch.nn.Module):
    """What a dynamic generation export records (importers.generation): a SymInt added to
    a counter buffer (`cumulative_length.add_(kv_length)`), a buffer filled with a length
    (`ring_length.fill_(rows)`), and the last row by a negative slice (`logits_to_keep`)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("counter", torch.zeros((), dtype=torch.int64))
        self.register_buffer("filled", torch.zeros(2, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        self.counter.add_(x.shape[1])
        self.filled.fill_(x.shape[1])
        return x[:, -1:] * 2, self.counter + 0, self.filled * 1


@pytest.fixture(scope="module")
def size_values() -> tg.Program:
    seq = torch.export.Dim("seq", min=1, max=40)
    program = torch.export.export(_SizeValues(), (torch.randn(3, 5),), dynamic_shapes=({1: seq},))
    graph = from_exported(program, "sizes")
    assert [d.describe() for d in graph.dims.values()] == ["seq in [1, 40]"]
    return tg.compile(graph)


@settings(max_examples=5)
@given(length=st.integers(1, 40))
def test_sizes_as_values_and_a_slice_from_the_end_follow_the_length(size_values, length) -> None:
    prog = size_values
    x = np.random.default_rng(length).standard_normal((3, length)).astype(np.float32)
    outs = prog.run({"x": x}, backend="numpy", state=prog.new_state("numpy"))
    np.testing.assert_array_equal(outs[0], x[:, -1:] * 2)
    assert int(outs[1]) == length  # the counter started at 0
    np.testing.assert_array_equal(outs[2], np.full(2, length, np.float32))
