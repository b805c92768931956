"""verify_assignment rejects every broken plan and names the culprits."""

import pytest

from tensorgraph.errors import PlanError
from tensorgraph.planner import Buffer, verify_assignment
from tensorgraph.planner.buffers import Assignment

BUFFERS = [Buffer("a", 100, 0, 3), Buffer("b", 50, 2, 5), Buffer("c", 80, 3, 6)]


def test_a_correct_plan_passes() -> None:
    # a and c never coexist ([0, 3) vs [3, 6)), so c may reuse a's bytes.
    verify_assignment(BUFFERS, Assignment({"a": 0, "b": 128, "c": 0}, 208), alignment=64)


def test_overlap_names_both_buffers() -> None:
    broken = Assignment({"a": 0, "b": 60, "c": 0}, 110)
    with pytest.raises(PlanError, match=r"buffer 'b'.*overlaps buffer 'a'|buffer 'a'.*buffer 'b'"):
        verify_assignment(BUFFERS, broken)


def test_misaligned_outside_and_missing() -> None:
    with pytest.raises(PlanError, match=r"buffer 'b'.*not aligned to 64"):
        verify_assignment(BUFFERS, Assignment({"a": 0, "b": 100, "c": 0}, 150), alignment=64)
    with pytest.raises(PlanError, match=r"buffer 'b'.*outside the arena of 149"):
        verify_assignment(BUFFERS, Assignment({"a": 0, "b": 100, "c": 0}, 149))
    with pytest.raises(PlanError, match="buffer 'c' has no offset"):
        verify_assignment(BUFFERS, Assignment({"a": 0, "b": 100}, 150))
    with pytest.raises(PlanError, match=r"buffer 'a'.*outside"):
        verify_assignment(BUFFERS, Assignment({"a": -1, "b": 100, "c": 0}, 150))


def test_overlap_hidden_behind_a_neighbour_is_found() -> None:
    # b sits inside a's bytes while a third, small buffer lies between them by offset.
    buffers = [Buffer("big", 100, 0, 4), Buffer("small", 10, 0, 4), Buffer("late", 10, 1, 2)]
    broken = Assignment({"big": 0, "small": 100, "late": 50}, 110)
    with pytest.raises(PlanError, match=r"'late'.*'big'|'big'.*'late'"):
        verify_assignment(buffers, broken)
