"""The interval model at its edges: sizes and steps that int64 cannot hold, exact lower
bounds for huge sums, empty buffers, and the MiniMalloc CSV reader and writer."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tensorgraph.errors import PlanError
from tensorgraph.planner import Buffer, assign_offsets, lower_bound, verify_assignment
from tensorgraph.planner.assign import ALGORITHMS
from tensorgraph.planner.buffers import (
    Assignment,
    peak,
    read_minimalloc_csv,
    write_minimalloc_csv,
)
from tensorgraph.planner.search import search_offsets
from tests.planner.test_assign import interval_sets

TWO_63 = 9223372036854775808  # 2**63 written out, so the tests do not share the constant
UNIT = 2**61


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (("big", 2**63, 0, 1), r"buffer 'big': size must be >= 0 and below 2\*\*63 but got 9223"),
        (("neg", -1, 0, 1), r"buffer 'neg': size must be >= 0 and below 2\*\*63 but got -1"),
        (("half", 1.5, 0, 1), r"buffer 'half': size must be an int but got 1.5"),
        (("flag", True, 0, 1), r"buffer 'flag': size must be an int but got True"),
        (("text", 8, "0", 1), r"buffer 'text': start must be an int but got '0'"),
        (("early", 8, -1, 1), r"buffer 'early': lifetime \[-1, 1\) must lie in \[0, 2\*\*63\)"),
        (("late", 8, 0, 2**63), r"buffer 'late': lifetime \[0, 9223372036854775808\) must lie"),
        (("empty", 8, 3, 3), r"buffer 'empty': lifetime \[3, 3\) is empty"),
        ((["list"], 8, 0, 1), r"buffer id \['list'\] is not hashable"),
    ],
)
def test_buffer_rejects_what_int64_or_a_lifetime_cannot_mean(fields, message) -> None:
    with pytest.raises(PlanError, match=message):
        Buffer(*fields)


def test_numpy_integers_become_python_ints() -> None:
    b = Buffer(0, np.int64(2**62), np.int32(1), np.uint8(3))
    assert (type(b.size), type(b.start), type(b.end)) == (int, int, int)
    # As Python ints the sum of two such sizes is exact; numpy's int64 would wrap.
    assert b.size + b.size == TWO_63


def test_lower_bound_is_exact_past_int64() -> None:
    # Both live at step 0: 2**62 + 2**62 = 2**63 bytes, one more than int64 holds.
    both = [Buffer("x", 2**62, 0, 2), Buffer("y", 2**62, 0, 1)]
    assert lower_bound(both) == TWO_63
    assert peak(both) == (TWO_63, 0)
    # Three of 2**62 bytes each and a fourth at another step: 3 * 2**62 at step 5.
    more = [Buffer(i, 2**62, 5, 6) for i in range(3)] + [Buffer(3, 7, 0, 1)]
    assert lower_bound(more) == 3 * 2**62


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_an_arena_of_2_63_bytes_is_a_plan_error(algorithm) -> None:
    both = [Buffer("x", 2**62, 0, 2), Buffer("y", 2**62, 0, 1)]
    with pytest.raises(PlanError, match=r"9223372036854775808 bytes are live at step 0.*'x'"):
        assign_offsets(both, algorithm)


def test_huge_sizes_that_never_meet_share_offset_zero() -> None:
    # Three buffers of 2**62 bytes with disjoint lifetimes: every reusing algorithm puts
    # each at 0 (the lowest offset, nothing live beside it), arena 2**62. With no reuse
    # the second would end at 2 * 2**62 = 2**63, past int64's largest value: a PlanError.
    huge = [Buffer(i, 2**62, i, i + 1) for i in range(3)]
    for algorithm in ("greedy_size", "greedy_breadth", "best"):
        plan = assign_offsets(huge, algorithm)
        assert plan.offsets == {0: 0, 1: 0, 2: 0} and plan.arena_size == 2**62
        verify_assignment(huge, plan)
    message = r"buffer 1 \(4611686018427387904 bytes\) would end at byte 9223372036854775808"
    with pytest.raises(PlanError, match=message):
        assign_offsets(huge, "naive")


def test_an_order_that_would_pass_2_63_is_a_plan_error_and_best_avoids_it() -> None:
    # In units U = 2**61: a (2U, steps [1, 2)), b (2U, [3, 4)), c (U, [1, 3)), d (U, [2, 4)).
    # Bound: step 1 holds a + c = 3U, step 2 c + d = 2U, step 3 b + d = 3U, so 3U < 2**63.
    # greedy_size places a at 0 and b at 0 (sizes first, earlier start first), c above a
    # at 2U, then d meets b's [0, 2U) and c's [2U, 3U): it lands at 3U and would end at
    # 4U = 2**63. A packing at 3U exists: c at 0, a at U, d at 2U, b at 0.
    a, b = Buffer("a", 2 * UNIT, 1, 2), Buffer("b", 2 * UNIT, 3, 4)
    c, d = Buffer("c", UNIT, 1, 3), Buffer("d", UNIT, 2, 4)
    buffers = [a, b, c, d]
    assert lower_bound(buffers) == 3 * UNIT
    with pytest.raises(PlanError, match=r"buffer 'd' \(2305843009213693952 bytes\) would end at"):
        assign_offsets(buffers, "greedy_size")
    plan = assign_offsets(buffers, "best")
    verify_assignment(buffers, plan)
    assert plan.arena_size == 3 * UNIT
    verify_assignment(buffers, Assignment({"a": UNIT, "b": 0, "c": 0, "d": 2 * UNIT}, 3 * UNIT))


def test_verify_refuses_offsets_and_arenas_int64_cannot_hold() -> None:
    one = [Buffer("a", 8, 0, 1)]
    with pytest.raises(PlanError, match=r"arena size must be an int in \[0, 2\*\*63\) but got 9"):
        verify_assignment(one, Assignment({"a": 2**63 - 8}, 2**63))
    with pytest.raises(PlanError, match=r"buffer 'a': offset must be an int but got 0.0"):
        verify_assignment(one, Assignment({"a": 0.0}, 8))
    with pytest.raises(PlanError, match=r"buffer 'a': offset must be an int but got False"):
        verify_assignment(one, Assignment({"a": False}, 8))
    verify_assignment(one, Assignment({"a": np.int64(0)}, 8))


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_naive_regression_empty_last_buffer_stays_inside_the_arena(algorithm) -> None:
    # compile(debug=True) once refused graphs whose last buffer was empty: naive put it at
    # the aligned cursor (128) past the arena top (100). Empty buffers now sit at 0 and
    # the arena is the 100 bytes of the one buffer with bytes.
    buffers = [Buffer("full", 100, 0, 2), Buffer("empty", 0, 0, 2)]
    plan = assign_offsets(buffers, algorithm, 64)
    assert plan.offsets == {"full": 0, "empty": 0} and plan.arena_size == 100
    verify_assignment(buffers, plan, 64)


def test_verify_accepts_an_empty_buffer_at_the_arena_top_only() -> None:
    buffers = [Buffer("full", 100, 0, 2), Buffer("empty", 0, 1, 3)]
    verify_assignment(buffers, Assignment({"full": 0, "empty": 100}, 100))
    with pytest.raises(PlanError, match=r"buffer 'empty'.*outside the arena of 100 bytes"):
        verify_assignment(buffers, Assignment({"full": 0, "empty": 164}, 100))


@settings(max_examples=30)
@given(
    interval_sets(max_size=25),
    st.lists(st.tuples(st.integers(0, 20), st.integers(1, 5)), max_size=6),
    st.sampled_from([1, 64]),
)
def test_empty_buffers_change_no_algorithm(buffers, empties, alignment) -> None:
    extra = [Buffer(f"empty{k}", 0, start, start + span) for k, (start, span) in enumerate(empties)]
    mixed = [b for pair in zip(extra, buffers, strict=False) for b in pair]
    mixed += buffers[len(extra) :] + extra[len(buffers) :]
    for name in ALGORITHMS:
        alone = assign_offsets(buffers, name, alignment, 20_000)
        together = assign_offsets(mixed, name, alignment, 20_000)
        verify_assignment(mixed, together, alignment)
        assert together.arena_size == alone.arena_size
        assert {k: v for k, v in together.offsets.items() if k in alone.offsets} == alone.offsets
        assert all(together.offsets[b.id] == 0 for b in extra)


def test_csv_size_above_int64_names_the_file_line_and_buffer(tmp_path) -> None:
    path = tmp_path / "huge.csv"
    path.write_text("id,lower,upper,size\n0,0,1,8\n7,0,2,9223372036854775808\n")
    with pytest.raises(PlanError, match=r"huge.csv:3: buffer 7: size must be >= 0 and below"):
        read_minimalloc_csv(path)


def test_csv_that_is_not_utf8_names_the_byte(tmp_path) -> None:
    path = tmp_path / "latin1.csv"
    path.write_bytes(b"id,lower,upper,size\n0,0,1,8\nb\xe4r,0,1,8\n")
    # 0xe4 (a Latin-1 umlaut) follows 20 bytes of header, 8 of row one and the 'b': offset 29.
    message = r"latin1.csv:3: not UTF-8 text \(byte 0xe4 at byte offset 29\)"
    with pytest.raises(PlanError, match=message):
        read_minimalloc_csv(path)


def test_csv_rows_with_an_empty_id_or_a_missing_field(tmp_path) -> None:
    path = tmp_path / "holes.csv"
    path.write_text("id,lower,upper,size\n,0,1,8\n")
    with pytest.raises(PlanError, match=r"holes.csv:2: empty id"):
        read_minimalloc_csv(path)
    path.write_text("id,lower,upper,size\n4,0,1\n")
    with pytest.raises(PlanError, match=r"holes.csv:2: non-integer field"):
        read_minimalloc_csv(path)


def test_solution_csv_round_trips(tmp_path) -> None:
    buffers = [Buffer(0, 8, 0, 2), Buffer("x", 8, 1, 3), Buffer(2, 0, 2, 4)]
    plan = Assignment({0: 0, "x": 8, 2: 0}, 16)
    path = tmp_path / "plan.csv"
    write_minimalloc_csv(path, buffers, plan)
    assert path.read_text() == "id,lower,upper,size,offset\n0,0,2,8,0\nx,1,3,8,8\n2,2,4,0,0\n"
    assert read_minimalloc_csv(path) == buffers


def test_exact_search_near_the_int64_limit() -> None:
    # Two overlapping buffers of 2**62 and 2**62 - 64 bytes need 2**63 - 64 stacked; with
    # alignment 64 both sizes and offsets are multiples of 64, so at capacity 2**63 - 1
    # one sits at 0 and the other right above it, and one byte less than they need
    # (2**63 - 65) is infeasible (the lower bound already exceeds it).
    buffers = [Buffer(0, 2**62, 0, 2), Buffer(1, 2**62 - 64, 1, 3)]
    found = search_offsets(buffers, 2**63 - 1, 64, 10_000)
    assert found.offsets is not None
    assert sorted(found.offsets.values()) in ([0, 2**62], [0, 2**62 - 64])
    verify_assignment(buffers, Assignment(found.offsets, 2**63 - 64), 64)
    below = search_offsets(buffers, 2**63 - 65, 64, 10_000)
    assert below.offsets is None and below.proven_infeasible
    assert assign_offsets(buffers, "best", 64).arena_size == 2**63 - 64
