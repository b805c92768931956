"""greedy_size against a straightforward reference: the same offsets and work on random
interval sets (hypothesis) and on DNN-like and dense synthetic sets, through each of the
three placement paths (waves, one at a time from the conflict lists, interval index)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tensorgraph.planner import Buffer, assign, assign_offsets, verify_assignment, waves
from tensorgraph.planner.assign import NEAR, PLACE_UNITS, greedy_size, place_in_order
from tensorgraph.planner.synthetic import dnn_like_buffers, random_buffers


def reference_greedy_size(buffers: list[Buffer], alignment: int) -> tuple[dict, int, int]:
    """(offsets, arena, work) of TFLite's greedy by size, written out plainly: buffers
    largest first (ties: longer lifetime, earlier start, smaller id), each at the lowest
    candidate (0 or a placed conflicting buffer's end, rounded up to `alignment`) that
    overlaps no placed buffer it conflicts with; the work is PLACE_UNITS per non-empty
    buffer plus one per NEAR conflicting pairs of non-empty buffers."""
    order = sorted(buffers, key=lambda b: (-b.size, -(b.end - b.start), b.start, b.id))
    placed: list[tuple[Buffer, int]] = []
    offsets = {b.id: 0 for b in buffers}
    pairs = 0
    for b in order:
        if not b.size:
            continue
        near = [(o, o + p.size) for p, o in placed if p.start < b.end and b.start < p.end]
        pairs += len(near)
        candidates = sorted({0} | {-(-high // alignment) * alignment for _, high in near})
        offsets[b.id] = next(
            c for c in candidates if all(high <= c or c + b.size <= low for low, high in near)
        )
        placed.append((b, offsets[b.id]))
    arena = max((o + b.size for b, o in placed), default=0)
    return offsets, arena, sum(1 for b in buffers if b.size) * PLACE_UNITS + pairs // NEAR


@st.composite
def interval_sets(draw: st.DrawFn) -> list[Buffer]:
    """Buffers with many ties (few sizes and lengths, as in DNNs), chains of conflicts,
    empty buffers, and sometimes sizes near 2**60 (so the segment keys need chunks)."""
    horizon = draw(st.integers(2, 40))
    huge = draw(st.booleans())
    sizes = st.sampled_from([0, 1, 64, 100, 4096]) | st.integers(1, 10**6)
    if huge:
        sizes = st.integers(2**57, 2**59)  # at most 12 of them: the sum stays below 2**63
    buffers = []
    for i in range(draw(st.integers(0, 12 if huge else 60))):
        start = draw(st.integers(0, horizon - 1))
        end = draw(st.integers(start + 1, min(horizon, start + draw(st.sampled_from([1, 3, 40])))))
        buffers.append(Buffer(i, draw(sizes), start, end))
    return buffers


PATHS = {
    # Every wave goes through the segmented gap search.
    "waves": {"MIN_WAVE": 1},
    # Everything after the first wave is placed one at a time from the conflict lists;
    # SCAN_LIMIT 2 sends buffers with 3 or more predecessors to the numpy gap search.
    "one by one": {"MIN_WAVE": 10**9, "SCAN_LIMIT": 2},
    # The interval index, as for very dense sets.
    "interval index": {"PAIR_LIMIT": -1},
}


@pytest.fixture(params=sorted(PATHS))
def path(request, monkeypatch) -> str:
    for name, value in PATHS[request.param].items():
        monkeypatch.setattr(assign if name == "PAIR_LIMIT" else waves, name, value)
    return request.param


def check_against_reference(buffers: list[Buffer], alignment: int) -> None:
    offsets, arena, work = reference_greedy_size(buffers, alignment)
    plan = assign_offsets(buffers, "greedy_size", alignment)
    verify_assignment(buffers, plan, alignment)
    assert plan.offsets == offsets
    assert plan.arena_size == arena
    full = [b for b in buffers if b.size]
    assert greedy_size(full, alignment).work == work


# The fixture only sets module constants, the same for every input: safe to share.
@settings(max_examples=80, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(buffers=interval_sets(), alignment=st.sampled_from([1, 16, 64, 1000]))
def test_greedy_size_equals_the_reference(path, buffers, alignment) -> None:
    check_against_reference(buffers, alignment)


@pytest.mark.parametrize("make", [dnn_like_buffers, random_buffers])
def test_greedy_size_equals_the_reference_on_synthetic_sets(path, make) -> None:
    check_against_reference(make(1200, seed=3), 64)


def test_a_chain_of_conflicts_is_one_wave_per_buffer() -> None:
    # Equal sizes and lengths, each buffer meeting the next: greedy_size alternates 0 and
    # 10 (each sees only its predecessor at the other offset); 1,000 one-buffer waves.
    buffers = [Buffer(i, 10, i, i + 2) for i in range(1000)]
    plan = assign_offsets(buffers, "greedy_size")
    assert [plan.offsets[i] for i in range(6)] == [0, 10, 0, 10, 0, 10]
    assert plan.arena_size == 20


def test_the_allowance_abandons_exactly_the_passes_that_cost_more() -> None:
    # Three mutually conflicting buffers: 3 * PLACE_UNITS + 3 pairs // NEAR units.
    buffers = [Buffer(i, 8, 0, 4) for i in range(3)]
    cost = 3 * PLACE_UNITS + 3 // NEAR
    assert place_in_order(buffers, [0, 1, 2], 1).work == cost
    assert assign.place_within(buffers, [0, 1, 2], 1, None, cost) is not None
    assert assign.place_within(buffers, [0, 1, 2], 1, None, cost - 1) is None


def test_conflicts_are_half_open_pairs_counted_once() -> None:
    # [0, 2) meets [1, 3) but not [2, 4); [1, 3) meets [2, 4); [0, 4) meets all three.
    buffers = waves.StartOrder.of(np.array([0, 1, 2, 0]), np.array([2, 3, 4, 4]))
    assert buffers.conflicts == 2 + 3
    assert buffers.rank.tolist() == [0, 3, 1, 2]  # ties by placement index


def test_a_wave_above_byte_2_to_the_61_is_placed_in_chunks(monkeypatch) -> None:
    # After A (2**61 bytes over [0, 4)) the segment keys owner * (2**61 + 1) + byte would
    # reach 2**62 for a second owner, so the wave {B, C} (both meet only A) goes in chunks
    # of one; each lands just above A, at 2**61.
    monkeypatch.setattr(waves, "MIN_WAVE", 1)
    buffers = [Buffer("A", 2**61, 0, 4), Buffer("B", 2**59, 0, 1), Buffer("C", 2**59, 2, 3)]
    plan = assign_offsets(buffers, "greedy_size")
    assert plan.offsets == {"A": 0, "B": 2**61, "C": 2**61}
    assert plan.arena_size == 2**61 + 2**59


def test_sizes_summing_past_2_to_the_63_are_placed_with_python_ints() -> None:
    # A, B, C (2**62 bytes each, one step apart) never meet, so they share offset 0,
    # though their sizes sum past 2**63; D meets all three and goes above them. Work:
    # 4 buffers * PLACE_UNITS + 3 conflicting pairs // NEAR.
    buffers = [Buffer(name, 2**62, t, t + 1) for t, name in enumerate("ABC")]
    buffers.append(Buffer("D", 8, 0, 3))
    plan = greedy_size(buffers, 1)
    assert plan.offsets == {"A": 0, "B": 0, "C": 0, "D": 2**62}
    assert plan.arena_size == 2**62 + 8
    assert plan.work == 4 * PLACE_UNITS + 3 // NEAR
