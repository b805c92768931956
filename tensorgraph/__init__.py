"""tensorgraph: a tensor-graph compiler with a live-range arena memory planner.

import tensorgraph as tg
g = tg.Graph("mlp")
x = g.input("x", (32, 1024), tg.float32)
w = g.param("w1", (1024, 1024), tg.float32)
g.output(tg.relu(x @ w + 1.0))
prog = tg.compile(g)
outs = prog.run({"x": x_np}, params={"w1": w_np}, backend="mlx")
"""

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
from tensorgraph.ir.builder import (
    Tensor,
    abs,
    add,
    arange,
    argmax,
    astype,
    avg_pool2d,
    broadcast_to,
    clip,
    concatenate,
    conv2d,
    cos,
    divide,
    equal,
    exp,
    expand_dims,
    flatten,
    full,
    gelu,
    gelu_approx,
    greater,
    greater_equal,
    less,
    less_equal,
    log,
    log_softmax,
    logical_and,
    logical_not,
    logical_or,
    matmul,
    max,
    max_pool2d,
    maximum,
    mean,
    min,
    minimum,
    multiply,
    narrow,
    negative,
    not_equal,
    ones,
    permute,
    power,
    reciprocal,
    relu,
    reshape,
    rsqrt,
    sigmoid,
    silu,
    sin,
    slice_update,
    softmax,
    sqrt,
    square,
    squeeze,
    stack,
    subtract,
    sum,
    swapaxes,
    take,
    tanh,
    transpose,
    where,
    zeros,
)
from tensorgraph.ir.conv import (
    adaptive_avg_pool2d,
    adaptive_max_pool2d,
    conv1d,
    conv_transpose1d,
    conv_transpose2d,
    pad,
    upsample_bilinear2d,
    upsample_nearest2d,
)
from tensorgraph.ir.dtypes import (
    DType,
    bfloat16,
    bool_,
    float16,
    float32,
    int8,
    int16,
    int32,
    int64,
    uint8,
)
from tensorgraph.ir.functions import all, any, argmin, cumprod, cumsum, gather, prod
from tensorgraph.ir.fused import (
    group_norm,
    layer_norm,
    rms_norm,
    rope,
    scaled_dot_product_attention,
)
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.math_functions import (
    arctan,
    arctan2,
    atan,
    atan2,
    bitwise_and,
    bitwise_invert,
    bitwise_not,
    bitwise_or,
    bitwise_xor,
    ceil,
    erf,
    expm1,
    floor,
    floor_divide,
    fmod,
    isinf,
    isnan,
    log1p,
    logical_xor,
    remainder,
    round,
    sign,
    tan,
    trunc,
)
from tensorgraph.ir.sorting import argsort, sort
from tensorgraph.multi import MultiProgram, compile_entries
from tensorgraph.runtime.state import State

__version__ = "0.1.0"


def load(path: str) -> Program | MultiProgram:
    """A program saved with `Program.save` (or `MultiProgram.save`), ready to run
    without recompiling (LoadError
    naming the file and the problem when it cannot be read)."""
    from tensorgraph.program_io import load as _load

    return _load(path)


def from_torch(module: object, example_inputs: object, name: str | None = None) -> Graph:
    """Import a PyTorch module through torch.export (needs the `torch` extra):
    `example_inputs` is a tuple of the forward's arguments, or one tensor; see
    tensorgraph.importers.torch_export."""
    from tensorgraph.importers.torch_export import from_torch as _from_torch

    return _from_torch(module, example_inputs, name)
