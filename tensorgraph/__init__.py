"""tensorgraph: a tensor-graph compiler with a live-range arena memory planner.

import tensorgraph as tg
g = tg.Graph("mlp")
x = g.input("x", (32, 1024), tg.float32)
w = g.param("w1", (1024, 1024), tg.float32)
g.output(tg.relu(x @ w + 1.0))
prog = tg.compile(g)
outs = prog.run({"x": x_np}, params={"w1": w_np}, backend="mlx")
"""

from tensorgraph import nn, optim
from tensorgraph.autodiff import value_and_grad
from tensorgraph.compiler import DEFAULT_PASSES, Program, compile
from tensorgraph.errors import (
    DTypeError,
    GraphError,
    LoadError,
    PlanError,
    RunError,
    SaveError,
    ShapeError,
    TensorGraphError,
)
from tensorgraph.ir.api import *  # noqa: F403  (graphs, dtypes, op functions: ir/api.py)
from tensorgraph.ir.graph import Graph
from tensorgraph.multi import MultiProgram, compile_entries
from tensorgraph.passes.quantize import quantize
from tensorgraph.passes.quantize_states import quantize_states
from tensorgraph.passes.to_dtype import to_dtype
from tensorgraph.runtime.state import State
from tensorgraph.training import train_step, train_step_from_gradients
from tensorgraph.weights_io import load_weights, save_weights

__version__ = "0.1.0"


def load(path: str) -> Program | MultiProgram:
    """A program saved with `Program.save` (or `MultiProgram.save`), ready to run
    without recompiling (LoadError
    naming the file and the problem when it cannot be read)."""
    from tensorgraph.program_io import load as _load

    return _load(path)


def from_torch(
    module: object,
    example_inputs: object,
    name: str | None = None,
    dynamic_shapes: object = None,
) -> Graph:
    """Import a PyTorch module through torch.export (needs the `torch` extra):
    `example_inputs` is a tuple of the forward's arguments, or one tensor;
    `dynamic_shapes` is torch.export's, its `torch.export.Dim`s becoming `tg.Dim`s; see
    tensorgraph.importers.torch_export."""
    from tensorgraph.importers.torch_export import from_torch as _from_torch

    return _from_torch(module, example_inputs, name, dynamic_shapes)
