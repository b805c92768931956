"""What a minimising offset algorithm can say about its own plan: an `Assignment` plus
the bounds that bracket the optimum.

Invariant of a `CertifiedAssignment` (checked in the constructor):
`bound <= arena_size`, and when `proven_infeasible` is set,
`bound <= proven_infeasible < arena_size`. The optimum arena (the smallest `arena_size`
of any valid assignment of the same buffers and alignment) then lies in
`[max(bound, proven_infeasible + 1), arena_size]`; the plan is *optimal* when that range
is a single value.
"""

from __future__ import annotations

from collections.abc import Sequence

from attrs import frozen

from tensorgraph.errors import PlanError
from tensorgraph.planner.buffers import Assignment, Buffer, lower_bound


@frozen
class CertifiedAssignment(Assignment):
    """An `Assignment` (all its fields and meaning) with a certificate: `bound`, a lower
    bound on the arena of every valid assignment (the live-bytes bound), and
    `proven_infeasible`, the largest arena size the exact search proved impossible
    (None when it proved nothing above the bound)."""

    bound: int = 0
    proven_infeasible: int | None = None

    def __attrs_post_init__(self) -> None:
        if self.bound > self.arena_size:
            raise PlanError(f"lower bound {self.bound} exceeds the arena {self.arena_size}")
        proven = self.proven_infeasible
        if proven is not None and not self.bound <= proven < self.arena_size:
            raise PlanError(
                f"proven infeasible arena {proven} must lie in [bound {self.bound}, arena "
                f"{self.arena_size})"
            )

    @property
    def optimum_at_least(self) -> int:
        """The smallest arena the certificate does not rule out."""
        if self.proven_infeasible is None:
            return self.bound
        return max(self.bound, self.proven_infeasible + 1)

    @property
    def is_optimal(self) -> bool:
        """True when no valid assignment has a smaller arena."""
        return self.arena_size <= self.optimum_at_least

    @property
    def certificate(self) -> str:
        """One line: "optimal (...)" with its reason, or the range the optimum lies in."""
        arena = self.arena_size
        if arena <= self.bound:
            return f"optimal (arena {arena:,} B = lower bound)"
        if self.is_optimal:
            return f"optimal (arena {arena:,} B; {arena - 1:,} B proven infeasible)"
        if self.proven_infeasible is None:
            return (
                f"optimum in [{self.bound:,}, {arena:,}] B (lower bound; nothing proven "
                "infeasible above it)"
            )
        return (
            f"optimum in [{self.optimum_at_least:,}, {arena:,}] B ({self.proven_infeasible:,} "
            f"B proven infeasible; lower bound {self.bound:,} B)"
        )


def certified(
    plan: Assignment, bound: int, proven_infeasible: int | None = None
) -> CertifiedAssignment:
    """`plan` with a certificate; a `proven_infeasible` at or below `bound` says nothing
    the bound does not, and is dropped."""
    if proven_infeasible is not None and proven_infeasible < bound:
        proven_infeasible = None
    return CertifiedAssignment(
        plan.offsets, plan.arena_size, plan.work, plan.cut_short, bound, proven_infeasible
    )


def arena_bound(buffers: Sequence[Buffer], alignment: int) -> int:
    """A lower bound on `arena_size` (the unaligned top) of any aligned assignment.

    At the busiest step every live buffer but the topmost spans at least its aligned
    size, and the topmost's unused slack is below `alignment`, so the aligned bound less
    `alignment - 1` holds; so does the plain bound."""
    if alignment == 1:
        return lower_bound(buffers, 1)
    return max(lower_bound(buffers, 1), lower_bound(buffers, alignment) - alignment + 1)
