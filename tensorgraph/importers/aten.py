"""The ATen handler table: one handler per Core ATen op, mapping it onto tensorgraph ops.

`ATEN` maps an ATen op's name (its overload packet, `aten.add`'s "add") to a handler
called as `handler(ctx, *args, **kwargs)` with the export node's arguments, in which
FX nodes are already replaced by the Tensors made for them; it returns a Tensor (or a
tuple, for ops with several results). Handlers emit what the export says and nothing
cleverer (a linear's transpose stays a transpose: folding and the passes take care of
it). A handler raises GraphError naming the export node for argument values it cannot
map (a rounding mode, a training-mode batch norm). `Context` gives handlers the graph
being built and the export node being mapped (its output shape and dtype).
Needs torch; import it through `tensorgraph.importers.torch_export`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

import tensorgraph as tg
from tensorgraph.errors import GraphError
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


class Context:
    """What handlers need: the graph being built and the export's node being mapped."""

    def __init__(self, graph: tg.Graph) -> None:
        self.graph = graph
        self.node: object = None

    @property
    def out_shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.node.meta["val"].shape)

    @property
    def out_dtype(self) -> tg.DType:
        return to_dtype(self.node.meta["val"].dtype)


def to_dtype(dtype: torch.dtype) -> tg.DType:
    """tensorgraph's dtype for a torch dtype; GraphError for one it lacks (complex...)."""
    if dtype not in DTYPES:
        raise GraphError(f"torch dtype {dtype} has no tensorgraph equivalent")
    return DTYPES[dtype]


Handler = Callable[..., object]
ATEN: dict[str, Handler] = {}


def handles(*names: str) -> Callable[[Handler], Handler]:
    """Decorator: register the handler under each ATen op name in `names`."""

    def register(fn: Handler) -> Handler:
        for name in names:
            ATEN[name] = fn
        return fn

    return register


def _dims(x: Tensor, dims: int | Sequence[int] | None) -> tuple[int, ...] | None:
    if dims is None:
        return None
    return (dims,) if isinstance(dims, int) else tuple(dims)


@handles("linear")
def _linear(ctx: Context, x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    y = x @ tg.transpose(weight)
    return y + bias if bias is not None else y


@handles("addmm")
def _addmm(
    ctx: Context, bias: Tensor, a: Tensor, b: Tensor, beta: float = 1, alpha: float = 1
) -> Tensor:
    product = a @ b
    product = product * alpha if alpha != 1 else product
    return (bias * beta if beta != 1 else bias) + product


@handles("mm", "bmm", "matmul")
def _matmul(ctx: Context, a: Tensor, b: Tensor) -> Tensor:
    return a @ b


@handles("t")
def _t(ctx: Context, x: Tensor) -> Tensor:
    return tg.transpose(x) if x.ndim == 2 else x


@handles("permute")
def _permute(ctx: Context, x: Tensor, dims: Sequence[int]) -> Tensor:
    return tg.transpose(x, dims)


@handles("transpose")
def _transpose(ctx: Context, x: Tensor, a: int, b: int) -> Tensor:
    return tg.swapaxes(x, a, b)


@handles("view", "reshape", "_unsafe_view", "flatten", "unsqueeze", "squeeze")
def _reshape(ctx: Context, x: Tensor, *args: object) -> Tensor:
    shape = ctx.out_shape
    return x if shape == x.shape else x.reshape(shape)


@handles("expand")
def _expand(ctx: Context, x: Tensor, sizes: Sequence[int], implicit: bool = False) -> Tensor:
    shape = ctx.out_shape
    return x if shape == x.shape else tg.broadcast_to(x, shape)


@handles("contiguous", "clone", "alias", "detach", "dropout", "lift_fresh_copy")
def _identity(ctx: Context, x: Tensor, *args: object, **kwargs: object) -> Tensor:
    return x


@handles("_to_copy", "to")
def _to(ctx: Context, x: Tensor, *args: object, **kwargs: object) -> Tensor:
    return x.astype(ctx.out_dtype)


@handles("embedding")
def _embedding(ctx: Context, weight: Tensor, indices: Tensor, *args: object) -> Tensor:
    return tg.take(weight, indices, 0)


def _arith(fn: Callable[[object, object], Tensor]) -> Handler:
    def handler(ctx: Context, a: object, b: object, alpha: float = 1) -> Tensor:
        return fn(a, b * alpha if alpha != 1 else b)

    return handler


ATEN["add"] = _arith(tg.add)
ATEN["sub"] = _arith(tg.subtract)
ATEN["rsub"] = _arith(lambda a, b: tg.subtract(b, a))
ATEN["mul"] = _arith(tg.multiply)


@handles("div")
def _div(ctx: Context, a: object, b: object, rounding_mode: str | None = None) -> Tensor:
    if rounding_mode is not None:
        raise GraphError(f"{ctx.node.name}: aten.div with rounding_mode={rounding_mode!r}")
    return tg.divide(a, b)


@handles("pow")
def _pow(ctx: Context, a: object, b: object) -> Tensor:
    if b == 2:
        return tg.square(a)
    if b == 0.5:
        return tg.sqrt(a)
    return tg.power(a, b)


UNARY = {
    "neg": tg.negative,
    "abs": tg.abs,
    "exp": tg.exp,
    "log": tg.log,
    "sqrt": tg.sqrt,
    "rsqrt": tg.rsqrt,
    "reciprocal": tg.reciprocal,
    "sin": tg.sin,
    "cos": tg.cos,
    "tanh": tg.tanh,
    "sigmoid": tg.sigmoid,
    "relu": tg.relu,
    "silu": tg.silu,
}
for _name, _fn in UNARY.items():
    ATEN[_name] = (lambda fn: lambda ctx, x: fn(x))(_fn)


@handles("gelu")
def _gelu(ctx: Context, x: Tensor, approximate: str = "none") -> Tensor:
    return tg.gelu(x, approximate)


@handles("hardtanh")
def _hardtanh(ctx: Context, x: Tensor, low: float = -1.0, high: float = 1.0) -> Tensor:
    return tg.clip(x, low, high)


COMPARE = {
    "eq": tg.equal,
    "ne": tg.not_equal,
    "lt": tg.less,
    "le": tg.less_equal,
    "gt": tg.greater,
    "ge": tg.greater_equal,
}
for _name, _fn in COMPARE.items():
    ATEN[_name] = (lambda fn: lambda ctx, a, b: fn(a, b))(_fn)


@handles("where")
def _where(ctx: Context, cond: Tensor, a: object, b: object) -> Tensor:
    return tg.where(cond, a, b)


@handles("mean", "sum")
def _reduce(
    ctx: Context, x: Tensor, dims: object = None, keepdim: bool = False, dtype: object = None
) -> Tensor:
    fn = tg.mean if ctx.node.target.overloadpacket.__name__ == "mean" else tg.sum
    axes = _dims(x, dims)
    return fn(x, axes or None, keepdim)


@handles("amax")
def _amax(ctx: Context, x: Tensor, dims: object = (), keepdim: bool = False) -> Tensor:
    return tg.max(x, _dims(x, dims) or None, keepdim)


@handles("softmax", "_softmax")
def _softmax(ctx: Context, x: Tensor, dim: int, *args: object) -> Tensor:
    return tg.softmax(x, dim)


@handles("log_softmax", "_log_softmax")
def _log_softmax(ctx: Context, x: Tensor, dim: int, *args: object) -> Tensor:
    return tg.log_softmax(x, dim)


@handles("cat")
def _cat(ctx: Context, tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    return tg.concatenate(list(tensors), dim)


@handles("slice")
def _slice(
    ctx: Context,
    x: Tensor,
    dim: int = 0,
    start: int | None = None,
    end: int | None = None,
    step: int = 1,
) -> Tensor:
    index = [slice(None)] * x.ndim
    index[dim] = slice(start, end, step)
    return x[tuple(index)]


@handles("select")
def _select(ctx: Context, x: Tensor, dim: int, index: int) -> Tensor:
    items: list[object] = [slice(None)] * x.ndim
    items[dim] = index
    return x[tuple(items)]


@handles("arange")
def _arange(ctx: Context, *args: object, **kwargs: object) -> Tensor:
    numbers = [a for a in args if isinstance(a, int | float)]
    start, end, step = (0, numbers[0], 1) if len(numbers) == 1 else (*numbers, 1)[:3]
    return tg.arange(ctx.graph, start, end, step, dtype=ctx.out_dtype)


@handles("full")
def _full(ctx: Context, size: Sequence[int], value: float, **kwargs: object) -> Tensor:
    return tg.full(ctx.graph, ctx.out_shape, value, ctx.out_dtype)


@handles("zeros", "ones")
def _zeros_ones(ctx: Context, size: Sequence[int], **kwargs: object) -> Tensor:
    value = 1 if ctx.node.target.overloadpacket.__name__ == "ones" else 0
    return tg.full(ctx.graph, ctx.out_shape, value, ctx.out_dtype)


def _triangle(ctx: Context, x: Tensor, diagonal: int, upper: bool) -> Tensor:
    rows, cols = x.shape[-2:]
    r = tg.arange(ctx.graph, 0, rows).reshape(rows, 1)
    c = tg.arange(ctx.graph, 0, cols).reshape(1, cols)
    keep = (c - r >= diagonal) if upper else (c - r <= diagonal)
    return tg.where(keep, x, tg.zeros(ctx.graph, x.shape, x.dtype))


@handles("triu")
def _triu(ctx: Context, x: Tensor, diagonal: int = 0) -> Tensor:
    return _triangle(ctx, x, diagonal, upper=True)


@handles("tril")
def _tril(ctx: Context, x: Tensor, diagonal: int = 0) -> Tensor:
    return _triangle(ctx, x, diagonal, upper=False)


def _bias_nchw(y: Tensor, bias: Tensor | None) -> Tensor:
    return y if bias is None else y + bias.reshape(1, -1, 1, 1)


@handles("conv2d")
def _conv2d(
    ctx: Context,
    x: Tensor,
    w: Tensor,
    bias: Tensor | None = None,
    stride: Sequence[int] = (1, 1),
    padding: object = (0, 0),
    dilation: Sequence[int] = (1, 1),
    groups: int = 1,
) -> Tensor:
    if isinstance(padding, str):
        raise GraphError(f"{ctx.node.name}: aten.conv2d with padding={padding!r}")
    return _bias_nchw(tg.conv2d(x, w, tuple(stride), tuple(padding), tuple(dilation), groups), bias)


@handles("convolution")
def _convolution(
    ctx: Context,
    x: Tensor,
    w: Tensor,
    bias: Tensor | None,
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    transposed: bool,
    output_padding: Sequence[int],
    groups: int,
) -> Tensor:
    if transposed or len(stride) != 2:
        raise GraphError(f"{ctx.node.name}: only 2-D, non-transposed aten.convolution")
    return _conv2d(ctx, x, w, bias, stride, padding, dilation, groups)


def _batch_norm_inference(
    x: Tensor, weight: Tensor | None, bias: Tensor | None, mean: Tensor, var: Tensor, eps: float
) -> Tensor:
    """x * scale + shift with scale = weight / sqrt(var + eps), shift = bias - mean * scale
    (per channel, axis 1): weight-only terms that folding turns into two params."""
    scale = tg.rsqrt(var + eps)
    if weight is not None:
        scale = scale * weight
    shift = -mean * scale if bias is None else bias - mean * scale
    shape = (1, -1) + (1,) * (x.ndim - 2)
    return x * scale.reshape(shape) + shift.reshape(shape)


@handles("batch_norm")
def _batch_norm(
    ctx: Context,
    x: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    mean: Tensor,
    var: Tensor,
    training: bool,
    momentum: float,
    eps: float,
    *args: object,
) -> Tensor:
    if training:
        raise GraphError(f"{ctx.node.name}: batch_norm in training mode (call .eval() first)")
    return _batch_norm_inference(x, weight, bias, mean, var, eps)


@handles("_native_batch_norm_legit_no_training")
def _native_batch_norm(
    ctx: Context,
    x: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    mean: Tensor,
    var: Tensor,
    momentum: float,
    eps: float,
) -> tuple:
    return (_batch_norm_inference(x, weight, bias, mean, var, eps), None, None)


@handles("adaptive_avg_pool2d")
def _adaptive_avg_pool2d(ctx: Context, x: Tensor, output_size: Sequence[int]) -> Tensor:
    oh, ow = output_size
    h, w = x.shape[2:]
    if (oh, ow) == (1, 1):
        return x.mean(axis=(2, 3), keepdims=True)
    if h % oh or w % ow:
        raise GraphError(
            f"{ctx.node.name}: adaptive_avg_pool2d {h}x{w} -> {oh}x{ow} needs divisible sizes"
        )
    return tg.avg_pool2d(x, (h // oh, w // ow))


@handles("max_pool2d", "max_pool2d_with_indices")
def _max_pool2d(
    ctx: Context,
    x: Tensor,
    kernel: Sequence[int],
    stride: Sequence[int] = (),
    padding: object = 0,
    dilation: object = 1,
    ceil_mode: bool = False,
) -> object:
    if ceil_mode or dilation not in (1, [1, 1], (1, 1)):
        raise GraphError(f"{ctx.node.name}: max_pool2d with ceil_mode or dilation")
    y = tg.max_pool2d(
        x,
        tuple(kernel),
        tuple(stride) or None,
        padding if isinstance(padding, int) else tuple(padding),
    )
    return (y, None) if ctx.node.target.overloadpacket.__name__.endswith("indices") else y


@handles("avg_pool2d")
def _avg_pool2d(
    ctx: Context,
    x: Tensor,
    kernel: Sequence[int],
    stride: Sequence[int] = (),
    padding: object = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: object = None,
) -> Tensor:
    if ceil_mode or divisor_override is not None:
        raise GraphError(f"{ctx.node.name}: avg_pool2d with ceil_mode or divisor_override")
    return tg.avg_pool2d(
        x,
        tuple(kernel),
        tuple(stride) or None,
        padding if isinstance(padding, int) else tuple(padding),
        count_include_pad,
    )


from tensorgraph.importers import aten_fused  # noqa: E402, F401  (attention and norm handlers)
