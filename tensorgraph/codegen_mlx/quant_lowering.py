"""MLX lowerings of `quantize`, `dequantize` and `quantized_matmul` (`ir.quantized`),
added to `LOWERINGS` on import: MLX's own `mx.quantize`, `mx.dequantize` and
`mx.quantized_matmul`, whose layout the IR shares, so a quantized weight reaches MLX as
it is stored (no repacking).

`mx.dequantize` gives the values the oracle gives bit for bit (runtime.quant_kernels);
`mx.quantized_matmul` accumulates in its own order and precision, so it agrees with the
oracle's float32 product to the rounding of the reduction, as a float matmul does.
MLX wants at least two axes for a packed weight: a 1-D one (a single row taken from
an embedding table) is lowered as one row and reshaped back. With a stacked weight MLX
ignores the weight's batch axes when x has fewer axes than it (x (M, K) with w (B, N,
Kp) gives (M, N)), so x is given the weight's rank first and broadcasts as in NumPy.
`mx.quantize` gives the bytes the oracle gives (quant_kernels). The `quantize` nodes of
one value's parts share one `mx.quantize` call (`_QUANTIZED`): inside `mx.compile`, MLX
0.32 fails ("_Map_base::at") on a trace where separate quantize calls of one array
meet again in a dequantize, which is what a quantized cache written and read in one
step is (measured; one shared call traces). A call's parts are held until every part
node has taken its own, then released, so nothing outlives its step.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx

from tensorgraph.codegen_mlx.arrays import MX_DTYPES
from tensorgraph.codegen_mlx.lowering import LOWERINGS, _lowered
from tensorgraph.ir.node import Node
from tensorgraph.ir.quantized import QUANTIZE_PARTS


def _options(node: Node) -> dict:
    return {
        "group_size": node.attr("group_size"),
        "bits": node.attr("bits"),
        "mode": node.attr("mode"),
    }


def _dequantize(node: Node, args: Sequence[mx.array]) -> mx.array:
    w, scales, *biases = args
    if w.ndim < 2:
        w, scales, biases = w[None], scales[None], [b[None] for b in biases]
    if node.attr("mode") == "affine":
        out = mx.dequantize(w, scales, biases[0], **_options(node))
    else:
        out = mx.dequantize(w, scales, dtype=MX_DTYPES[node.dtype.name], **_options(node))
    return out.reshape(node.shape)


def _quantized_matmul(node: Node, args: Sequence[mx.array]) -> mx.array:
    x, w, scales, *biases = args
    if w.ndim > 2 and x.ndim < w.ndim:
        x = x.reshape((1,) * (w.ndim - x.ndim) + x.shape)
    return mx.quantized_matmul(
        x,
        w,
        scales,
        biases[0] if biases else None,
        transpose=node.attr("transpose"),
        **_options(node),
    )


# (id of the quantized array, options) -> [the array, its parts, part names not yet taken]
_QUANTIZED: dict[tuple, list] = {}
_HELD_AT_MOST = 4  # calls held at once: the part nodes of a value run close together


def _quantize(node: Node, args: Sequence[mx.array]) -> mx.array:
    x, options = args[0], _options(node)
    key = (id(x), *options.values())
    held = _QUANTIZED.get(key)
    if held is None or held[0] is not x:  # a new array (an id can be reused once freed)
        names = (
            ("codes", "scales", "biases") if options["mode"] == "affine" else ("codes", "scales")
        )
        held = _QUANTIZED[key] = [x, mx.quantize(x, **options), set(names)]
        while len(_QUANTIZED) > _HELD_AT_MOST:  # a part no node takes must not pile up
            del _QUANTIZED[next(iter(_QUANTIZED))]
    part = node.attr("part")
    held[2].discard(part)
    if not held[2]:  # every part taken: release the array and its parts
        del _QUANTIZED[key]
    return held[1][QUANTIZE_PARTS.index(part)]


LOWERINGS.update(
    {
        "quantize": _lowered("quantize", _quantize),
        "dequantize": _lowered("dequantize", _dequantize),
        "quantized_matmul": _lowered("quantized_matmul", _quantized_matmul),
    }
)
