"""The ATen handler table's core, and the layout handlers (views, permutes, casts).

`ATEN` maps an ATen op's name (its overload packet: `aten.add.Tensor` is "add") to a
handler called as `handler(ctx, *args, **kwargs)` with the FX node's arguments, FX nodes
already replaced by the Tensors made for them; it returns a Tensor (or a tuple, for ops
with several results). The handler modules, one concept each, register into it:
`aten` (this one: layout), `aten_math` (elementwise, comparisons, reductions),
`aten_index` (slicing, gathers, concatenation, generators), `aten_nn` (convolution,
pooling, normalisation, activations) and `aten_fused` (the fused composites).

Handler contract: check every argument first and raise `Unsupported` (a GraphError)
naming each value the handler cannot map; the importer collects these across the whole
graph. A `dtype` keyword is always honoured (an op that takes one declares it); the
importer checks every result's shape and dtype against torch's, so a handler that
computes in the wrong dtype is reported, never silently accepted. `Context` gives
handlers the graph being built and the FX node being mapped (torch's output shape and
dtype, the overload). Needs torch; import it through `tensorgraph.importers.torch_export`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from tensorgraph.errors import GraphError
from tensorgraph.importers.sym_sizes import to_extent
from tensorgraph.ir import api as tg
from tensorgraph.ir.tensor import Tensor

DTYPES = {
    torch.float32: tg.float32,
    torch.float16: tg.float16,
    torch.bfloat16: tg.bfloat16,
    torch.int64: tg.int64,
    torch.int32: tg.int32,
    torch.int16: tg.int16,
    torch.int8: tg.int8,
    torch.uint8: tg.uint8,
    torch.bool: tg.bool_,
}


class Unsupported(GraphError):
    """An argument value a handler cannot map (the importer lists every one)."""


class Context:
    """What handlers need: the graph being built and the FX node being mapped."""

    def __init__(self, graph: tg.Graph) -> None:
        self.graph = graph
        self.node: torch.fx.Node | None = None

    @property
    def meta(self) -> object:
        """torch's fake value for the node's result (a tensor, or a tuple of them)."""
        return self.node.meta["val"]

    @property
    def out_shape(self) -> tuple[int, ...]:
        meta = self.meta if isinstance(self.meta, torch.Tensor) else self.meta[0]
        return static_shape(meta)

    @property
    def out_dtype(self) -> tg.DType:
        meta = self.meta if isinstance(self.meta, torch.Tensor) else self.meta[0]
        return to_dtype(meta.dtype)

    @property
    def overload(self) -> str:
        """The overload's name: "Tensor" for aten.add.Tensor, "dim" for aten.max.dim."""
        return getattr(self.node.target, "_overloadname", "default")

    @property
    def op(self) -> str:
        return op_name(self.node.target)

    def promoted(self, *positions: int) -> tg.DType:
        """torch's result type of the node's arguments at `positions` (tensors, scalars)."""
        values = []
        for p in positions:
            arg = self.node.args[p]
            values.append(arg.meta["val"] if isinstance(arg, torch.fx.Node) else arg)
        dtype = values[0].dtype if len(values) == 1 else torch.result_type(*values)
        return to_dtype(dtype)


def shape_problem(meta: torch.Tensor) -> str:
    """'' when every dimension of torch's value `meta` is an int, else why tensorgraph
    cannot plan it: a dynamic input dimension, or one that depends on the data (nonzero,
    a boolean mask index). A dynamic dimension the import maps to a Dim
    (`importers.sym_sizes`) is no problem: its extent is an expression of that Dim."""
    if all(to_extent(d) is not None for d in meta.shape):
        return ""
    return (
        f"shape {tuple(meta.shape)} is dynamic or depends on the data; tensorgraph "
        "plans static shapes and bounded dims (give each dynamic dim a "
        "torch.export.Dim with max=, avoid nonzero and boolean-mask indexing)"
    )


def static_shape(meta: torch.Tensor) -> tuple[int, ...]:
    """`meta`'s shape as extents (ints, or expressions of the import's Dims);
    Unsupported with `shape_problem` when it has one."""
    problem = shape_problem(meta)
    if problem:
        raise Unsupported(problem)
    return tuple(to_extent(d) for d in meta.shape)


def op_name(target: object) -> str:
    """The ATen op name of an FX call target ("add" for aten.add.Tensor)."""
    packet = getattr(target, "overloadpacket", None)
    return packet.__name__ if packet is not None else getattr(target, "__name__", str(target))


def to_dtype(dtype: torch.dtype | None, default: tg.DType | None = None) -> tg.DType:
    """tensorgraph's dtype for a torch dtype (`default` for None); Unsupported for one it
    lacks (float64, complex)."""
    if dtype is None and default is not None:
        return default
    if dtype not in DTYPES:
        raise Unsupported(f"torch dtype {dtype} has no tensorgraph equivalent")
    return DTYPES[dtype]


def cast(x: object, dtype: tg.DType) -> object:
    """`x` in `dtype` (scalars are left to the op's weak typing)."""
    return x.astype(dtype) if isinstance(x, Tensor) and x.dtype != dtype else x


def axes_of(x: Tensor, dims: int | Sequence[int] | None) -> tuple[int, ...] | None:
    """ATen's dim argument as axes: None or [] is every axis, negatives count from the end."""
    if dims is None:
        return None
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    if not dims:
        return None
    rank = max(x.ndim, 1)
    return tuple(d % rank for d in dims)


def require(ok: bool, what: str) -> None:
    """Unsupported naming `what` when `ok` is false (a handler's argument check)."""
    if not ok:
        raise Unsupported(f"{what} is not supported")


Handler = Callable[..., object]
ATEN: dict[str, Handler] = {}


def handles(*names: str) -> Callable[[Handler], Handler]:
    """Decorator: register the handler under each ATen op name in `names`."""

    def register(fn: Handler) -> Handler:
        for name in names:
            ATEN[name] = fn
        return fn

    return register


# ---------------------------------------------------------------- layout handlers


@handles("view", "reshape", "flatten", "unsqueeze", "squeeze", "unflatten", "view_copy")
def _reshape(ctx: Context, x: Tensor, *args: object) -> Tensor:
    # Every form names the same thing, torch's output shape; storage is contiguous.
    shape = ctx.out_shape
    return x if shape == x.shape else x.reshape(shape)


@handles("as_strided", "as_strided_copy")
def _as_strided(
    ctx: Context, x: Tensor, size: Sequence[int], stride: Sequence[int], offset: int | None = 0
) -> Tensor:
    # Decompositions emit as_strided for memory-format bookkeeping (a 1x1 adaptive pool):
    # only the row-major strides of `size` over all of `x` are a reshape.
    expected, step = [], 1
    for dim in reversed(size):
        expected.append(step)
        step *= dim
    expected.reverse()
    contiguous = all(s == e for s, e, d in zip(stride, expected, size, strict=True) if d != 1)
    require(contiguous and not offset and step == x.size, f"as_strided stride {stride}")
    return x if tuple(size) == x.shape else x.reshape(tuple(size))


@handles("expand")
def _expand(ctx: Context, x: Tensor, sizes: Sequence[int], implicit: bool = False) -> Tensor:
    shape = ctx.out_shape
    return x if shape == x.shape else tg.broadcast_to(x, shape)


@handles("permute", "permute_copy")
def _permute(ctx: Context, x: Tensor, dims: Sequence[int]) -> Tensor:
    return tg.transpose(x, dims)


@handles("clone", "alias", "lift_fresh_copy")
def _identity(ctx: Context, x: Tensor, memory_format: object = None) -> Tensor:
    return x


@handles("_to_copy")
def _to(ctx: Context, x: Tensor, *args: object, **kwargs: object) -> Tensor:
    # Every overload (to.dtype, to.device, to.other, _to_copy(dtype=)) is a cast to the
    # dtype torch gives the result: placement arguments are meaningless here.
    allowed = {"dtype", "copy", "non_blocking", "dim_order"}
    unknown = sorted(set(kwargs) - allowed)
    require(not unknown, f"{ctx.op} argument(s) {unknown}")
    return cast(x, ctx.out_dtype)


@handles("copy")
def _copy(ctx: Context, x: Tensor, src: Tensor, non_blocking: bool = False) -> Tensor:
    # Functional copy_: src in x's dtype, broadcast to x's shape (x's values are unused).
    src = cast(src, x.dtype)
    return src if src.shape == x.shape else tg.broadcast_to(src, x.shape)
