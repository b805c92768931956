"""The memory planner: liveness, offset algorithms, plan verification, reports."""

from tensorgraph.planner.assign import ALGORITHMS, assign_offsets
from tensorgraph.planner.buffers import Assignment, Buffer, lower_bound, read_minimalloc_csv
from tensorgraph.planner.certificate import CertifiedAssignment
from tensorgraph.planner.verify import verify_assignment

__all__ = [
    "ALGORITHMS",
    "Assignment",
    "Buffer",
    "CertifiedAssignment",
    "assign_offsets",
    "lower_bound",
    "read_minimalloc_csv",
    "verify_assignment",
]
