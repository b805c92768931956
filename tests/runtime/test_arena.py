"""The arena executor is an oracle that can fail: correct plans give the reference's
numbers bit for bit, and a plan that overlaps live buffers or clobbers an output gives
different numbers (while the independent verifier names the two buffers)."""

import attrs
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.planner.aliasing import Alias, Aliasing
from tensorgraph.planner.assign import ALGORITHMS
from tensorgraph.planner.buffers import Assignment
from tensorgraph.planner.plan import MemoryPlan, plan_memory
from tensorgraph.planner.verify import verify_assignment
from tensorgraph.runtime.arena import GARBAGE, POISON_FLOAT, run_arena
from tensorgraph.runtime.reference import run_reference
from tests.strategies import feeds, graphs

RNG = np.random.default_rng(0)


def assert_exact(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    """Same count, then shape, dtype and bits (NaN equal to NaN) of every output."""
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        assert g.dtype == w.dtype
        assert np.array_equal(g, w, equal_nan=True)


def moved(plan: MemoryPlan, victim: int, offset: int) -> MemoryPlan:
    """`plan` with buffer `victim` (and every node stored in it) moved to `offset`."""
    storage = plan.liveness.storage
    offsets = {
        n: offset + storage[n].offset if storage[n].root == victim else at
        for n, at in plan.offsets.items()
    }
    return attrs.evolve(
        plan, buffer_offsets={**plan.buffer_offsets, victim: offset}, offsets=offsets
    )


def rejected(plan: MemoryPlan, first: int, second: int) -> None:
    """The verifier refuses `plan`, naming both buffers (in either order)."""
    assignment = Assignment(dict(plan.buffer_offsets), plan.arena_size)
    pattern = rf"buffer {first} .*buffer {second} |buffer {second} .*buffer {first} "
    with pytest.raises(tg.PlanError, match=pattern):
        verify_assignment(plan.buffers, assignment, plan.alignment)


# ---------------------------------------------------------------- correct plans


@settings(max_examples=100)
@given(graphs(), st.sampled_from(sorted(ALGORITHMS)), st.sampled_from([0x00, 0xA5, 0xFF]))
def test_random_graphs_run_in_the_arena_exactly_as_the_reference(graph, algorithm, fill) -> None:
    prog = tg.compile(graph, planner=algorithm, alignment=16)
    inputs, params = feeds(graph)
    want = run_reference(graph, inputs, params)
    assert_exact(run_arena(prog.graph, prog.plan, inputs, params, fill=fill), want)


@given(graphs(), st.booleans(), st.sampled_from([0, 8]), st.sampled_from([1, 64]))
def test_plan_options_keep_the_arena_exact(graph, params_in_arena, tail_guard, alignment) -> None:
    prog = tg.compile(
        graph, alignment=alignment, params_in_arena=params_in_arena, tail_guard=tail_guard
    )
    inputs, params = feeds(graph, seed=1)
    assert_exact(prog.run(inputs, params, backend="arena"), run_reference(graph, inputs, params))


def test_a_model_runs_exactly_with_weights_in_the_arena() -> None:
    from tensorgraph.models import build_model

    model = build_model("gpt2", seq=8, dim=32, heads=2, vocab=16, max_positions=8)
    inputs = model.inputs(0)
    want = run_reference(model.graph, inputs)
    prog = tg.compile(model.graph, params_in_arena=True)
    assert prog.plan.constant_size == 0
    assert prog.plan.arena_size >= sum(v.nbytes for v in model.graph.param_values.values())
    assert_exact(prog.run(inputs, backend="arena"), want)


def test_a_hand_marked_inplace_chain_runs_in_one_buffer() -> None:
    g = tg.Graph("chain")
    x = g.input("x", (8, 8))
    a = tg.exp(tg.tanh(x))
    b = tg.sin(a)  # into a
    c = b * x  # into b, so into a
    g.output(c)
    chain = Aliasing({b.id: Alias(a.id, 0, "inplace"), c.id: Alias(b.id, 0, "inplace")})
    plan = plan_memory(g, None, chain, algorithm="best", alignment=64)
    assert plan.offsets[a.id] == plan.offsets[b.id] == plan.offsets[c.id]
    inputs = {"x": RNG.uniform(-1, 1, (8, 8)).astype(np.float32)}
    assert_exact(run_arena(g, plan, inputs), run_reference(g, inputs))


def test_an_inplace_write_over_bytes_read_with_another_mapping_is_refused() -> None:
    # The blind spot: r + narrow(r, 0, 0, 1) written over r. Row 0 of r is read
    # (broadcast) for every row while the add overwrites it, so a kernel writing element
    # by element would read clobbered values for rows 1..3; computing into a temporary
    # hides that. The alias analysis never makes this decision, the plan verifier and
    # the arena executor both refuse it when it is forced.
    g = tg.Graph("blind")
    r = tg.exp(g.input("x", (4, 8)))
    head = tg.narrow(r, 0, 0, 1)  # a view of r's first row
    total = r + head
    g.output(tg.tanh(total))
    assert total.id not in tg.compile(g).aliasing.aliases
    forced = Aliasing({head.id: Alias(r.id, 0, "view"), total.id: Alias(r.id, 0, "inplace")})
    with pytest.raises(tg.PlanError, match=rf"%{total.id} add at step \d+ writes bytes"):
        plan_memory(g, None, forced, algorithm="greedy_size", alignment=64)
    unchecked = plan_memory(g, None, forced, algorithm="greedy_size", alignment=64, check=False)
    inputs = {"x": RNG.uniform(-1, 1, (4, 8)).astype(np.float32)}
    with pytest.raises(tg.PlanError, match=rf"%{total.id} add writes arena bytes .* %{head.id}"):
        run_arena(g, unchecked, inputs)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64])
def test_the_fill_reads_as_nan_in_every_float_type(dtype) -> None:
    # 0xFF bytes: all-ones exponent and a non-zero mantissa in every IEEE-style format.
    assert np.isnan(np.full(16, GARBAGE, np.uint8).view(dtype).astype(np.float64)).all()
    assert np.isnan(np.full(16, POISON_FLOAT, np.uint8).view(dtype).astype(np.float64)).all()


def test_a_value_read_after_its_buffer_was_released_reads_poison() -> None:
    # Shorten a's lifetime by hand (it ends right after its own step), so the plan says
    # its bytes are free while the add still reads them: the executor poisons released
    # bytes, and the add sees NaN instead of a stale but plausible value.
    g, a, _ = two_live_values()
    prog = tg.compile(g, passes=(), schedule="program")
    plan = prog.plan
    short = [
        attrs.evolve(buf, end=buf.start + 1) if buf.id == a.id else buf for buf in plan.buffers
    ]
    broken = attrs.evolve(plan, buffers=tuple(short))
    inputs = {"x": RNG.uniform(-1, 1, (16, 16)).astype(np.float32)}
    got = run_arena(prog.graph, broken, inputs)[0]
    assert np.isnan(got).all()


# ---------------------------------------------------------------- broken plans


def two_live_values() -> tuple[tg.Graph, tg.Tensor, tg.Tensor]:
    g = tg.Graph("two")
    x = g.input("x", (16, 16))
    a = tg.exp(x)  # step 1
    b = tg.tanh(x)  # step 2: a and b are live together until the add
    g.output(a + b)
    return g, a, b


def test_acceptance_an_overlapping_plan_is_rejected_and_gives_wrong_numbers() -> None:
    g, a, b = two_live_values()
    prog = tg.compile(g, passes=("dce", "cse", "view_alias"), schedule="program")
    plan = prog.plan
    live = {buf.id: buf for buf in plan.buffers}
    assert live[a.id].overlaps(live[b.id])
    broken = moved(plan, b.id, plan.buffer_offsets[a.id])
    rejected(broken, a.id, b.id)
    inputs = {"x": RNG.uniform(-1, 1, (16, 16)).astype(np.float32)}
    want = run_reference(g, inputs)
    assert_exact(run_arena(prog.graph, plan, inputs), want)
    wrong = run_arena(prog.graph, broken, inputs)[0]
    assert not np.allclose(wrong, want[0]), "b's write over a must show in the sum"
    np.testing.assert_array_equal(wrong, 2 * np.tanh(inputs["x"]))


def test_hazard_an_output_overwritten_after_its_step_gives_wrong_numbers() -> None:
    g = tg.Graph("clobber")
    x = g.input("x", (8, 8))
    y = tg.exp(x)  # step 1, an output: must survive to the end
    t = tg.tanh(x)  # step 2
    g.output(y, tg.sin(t))  # sin at step 3
    prog = tg.compile(g, passes=(), schedule="program")
    broken = moved(prog.plan, t.id, prog.plan.buffer_offsets[y.id])
    rejected(broken, y.id, t.id)
    inputs = {"x": RNG.uniform(-1, 1, (8, 8)).astype(np.float32)}
    want = run_reference(g, inputs)
    got = run_arena(prog.graph, broken, inputs)
    np.testing.assert_array_equal(got[1], want[1])
    assert not np.array_equal(got[0], want[0]), "outputs are copied out only at the end"


def test_an_offset_outside_the_arena_names_the_node() -> None:
    g, a, _ = two_live_values()
    prog = tg.compile(g, passes=(), schedule="program")
    broken = attrs.evolve(prog.plan, offsets={**prog.plan.offsets, a.id: prog.plan.arena_size})
    inputs = {"x": np.zeros((16, 16), np.float32)}
    with pytest.raises(tg.PlanError, match=rf"%{a.id} exp: bytes .* outside the arena of"):
        run_arena(prog.graph, broken, inputs)
    negative = attrs.evolve(prog.plan, offsets={**prog.plan.offsets, a.id: -4})
    with pytest.raises(tg.PlanError, match=rf"%{a.id} exp: bytes \[-4, "):
        run_arena(prog.graph, negative, inputs)


def test_a_value_without_an_offset_names_the_node() -> None:
    g, _, b = two_live_values()
    prog = tg.compile(g, passes=(), schedule="program")
    offsets = {k: v for k, v in prog.plan.offsets.items() if k != b.id}
    broken = attrs.evolve(prog.plan, offsets=offsets)
    with pytest.raises(tg.PlanError, match=rf"%{b.id} tanh: the plan gives this value no offset"):
        run_arena(prog.graph, broken, {"x": np.zeros((16, 16), np.float32)})


def test_bad_feeds_and_fill_are_run_errors() -> None:
    g, _, _ = two_live_values()
    prog = tg.compile(g)
    with pytest.raises(tg.RunError, match="'x'"):
        run_arena(prog.graph, prog.plan, {})
    with pytest.raises(tg.RunError, match="fill must be a byte value"):
        run_arena(prog.graph, prog.plan, {"x": np.zeros((16, 16), np.float32)}, fill=256)
