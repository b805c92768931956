"""Graph rewrites, one per module, each a pure `graph -> PassResult` function."""

from tensorgraph.passes.cse import cse
from tensorgraph.passes.dce import dce
from tensorgraph.passes.manager import PASSES, run_passes
from tensorgraph.passes.reinplace import reinplace
from tensorgraph.passes.result import PassResult
from tensorgraph.passes.view_alias import view_alias

__all__ = ["PASSES", "PassResult", "cse", "dce", "reinplace", "run_passes", "view_alias"]
