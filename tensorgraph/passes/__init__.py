"""Rewrite passes, one per module, each a pure `graph -> PassResult` function that keeps
every output's value for every input. Alias analyses (views, reinplacing) are not
rewrites: they live in `tensorgraph.planner.aliasing` and run after scheduling."""

from tensorgraph.passes.cse import cse
from tensorgraph.passes.dce import dce
from tensorgraph.passes.fold import fold
from tensorgraph.passes.result import PassResult

REWRITES = {"dce": dce, "cse": cse, "fold": fold}  # in the order the compiler runs them

__all__ = ["REWRITES", "PassResult", "cse", "dce", "fold"]
