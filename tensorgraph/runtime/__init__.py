"""The two NumPy oracles: the reference interpreter and the arena executor, sharing one
kernel table and one feed check."""

from tensorgraph.runtime.arena import run_arena
from tensorgraph.runtime.feeds import bind_feeds
from tensorgraph.runtime.kernels import KERNELS, Kernel, constant_value, evaluate
from tensorgraph.runtime.reference import run_reference

__all__ = [
    "KERNELS",
    "Kernel",
    "bind_feeds",
    "constant_value",
    "evaluate",
    "run_arena",
    "run_reference",
]
