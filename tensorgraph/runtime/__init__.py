"""The two NumPy oracles: the reference interpreter and the arena executor."""

from tensorgraph.runtime.feeds import bind_feeds
from tensorgraph.runtime.kernels import KERNELS, constant_value, evaluate
from tensorgraph.runtime.reference import run_reference

__all__ = ["KERNELS", "bind_feeds", "constant_value", "evaluate", "run_reference"]
