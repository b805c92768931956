"""Rewrite passes, one per module, each a pure `graph -> PassResult` function that keeps
every output's value for every input. Alias analyses (views, reinplacing) are not
rewrites: they live in `tensorgraph.planner.aliasing` and run after scheduling."""

from tensorgraph.passes.cse import cse
from tensorgraph.passes.dce import dce
from tensorgraph.passes.fold import fold
from tensorgraph.passes.result import PassResult
from tensorgraph.passes.transposed_matmul import transposed_matmul

# in the order the compiler runs them
REWRITES = {"dce": dce, "cse": cse, "fold": fold, "transposed_matmul": transposed_matmul}

__all__ = ["REWRITES", "PassResult", "cse", "dce", "fold", "transposed_matmul"]
