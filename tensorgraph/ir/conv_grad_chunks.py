"""A convolution's weight gradient in chunks, so that the patches it contracts stay near
the size of what it reads (the autodiff rule of conv2d and conv_transpose2d emits it).

Why. `conv2d_weight_backward` contracts a patch matrix of N*OH*OW rows by C*KH*KW
columns, its declared workspace (ir/conv_grad.py): KH*KW times x for a stride-1
convolution, 37x x (and 4.8 MB beside a 0.4 MB image) at the zoo CNN's 7x7 stem, 943 MB
for a 7x7 stem over 128 ImageNet images. MLX's own convolution VJP holds the same
matrix. A plan cannot overlap a workspace with anything live at its step, so one such
op can set the whole step's floor, and no recompute lowers it.

The rule. The gradient is a sum over the batch and over output rows, so it splits
exactly. With `limit = max(bytes of x + bytes of g, CHUNK_FLOOR)` and `pieces =
ceil(patches / limit)`, it is split into chunks of N // pieces images (or OH // pieces
output rows), each contracting at most `limit` bytes of patches (a single output row's
may exceed it: rows are not split further). A step then holds at most about twice its
operands, and no chunk is so small that dispatching it costs more than it saves (1 MiB
of patches is a product of ~0.3 ms on this machine's CPU per 64 output channels,
against ~20 us of MLX dispatch per op). The split is over
the batch where it has at least `pieces` images (axis-0 slices are views: no copy);
otherwise over output rows with the whole batch, each chunk reading only the rows of
x its taps reach (a band copy of x and of g, 1 / pieces of each). The partial
gradients are summed in order (in float32 for half types, rounded once at the end),
so all backends compute the same sum; it differs from the unchunked product only by
float reassociation. A graph with symbolic extents is not split (the sizes are not
known when the rule runs).
"""

from __future__ import annotations

from tensorgraph.ir import functions as fn
from tensorgraph.ir.conv_grad import conv2d_weight_backward, patch_elements
from tensorgraph.ir.dtypes import float32
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.ir.tensor import Tensor

CHUNK_FLOOR = 1 << 20  # bytes of patches below which a weight gradient is never split


def patch_bytes(x: Tensor, g: Tensor, kernel: tuple[int, int]) -> int:
    """Bytes of the patch matrix one op over all of x and g contracts (N*OH*OW rows,
    C*KH*KW columns, at least float32 wide: the kernels' precision)."""
    return patch_elements(x.shape, g.shape, kernel) * max(x.dtype.itemsize, 4)


def chunk_count(x: Tensor, g: Tensor, kernel: tuple[int, int], limit: int | None = None) -> int:
    """How many ops the weight gradient of x and g splits into so that each contracts
    at most `limit` bytes of patches (None: the autodiff rule's, module docstring): 1
    where the patches fit, where an extent is symbolic or the op is empty."""
    extents = (*x.shape, *g.shape)
    if not all(isinstance(e, int) for e in extents) or 0 in extents:
        return 1
    limit = max(x.nbytes + g.nbytes, CHUNK_FLOOR) if limit is None else max(1, limit)
    return max(1, -(-patch_bytes(x, g, kernel) // limit))


def chunked_weight_gradient(
    x: Tensor,
    g: Tensor,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
    groups: int,
    limit: int | None = None,
) -> Tensor:
    """d <conv2d(x, w), g> / dw (the (KH, KW) = `kernel` weight's cotangent) as the sum
    of `chunk_count(x, g, kernel, limit)` weight-gradient ops over batch or row chunks
    (module docstring)."""
    pieces = chunk_count(x, g, kernel, limit)

    def op(xs: Tensor, gs: Tensor, top: int) -> Tensor:
        return conv2d_weight_backward(xs, gs, kernel, stride, (top, padding[1]), dilation, groups)

    if pieces == 1:
        return op(x, g, padding[0])
    n, oh = x.shape[0], g.shape[2]
    parts = []
    if n >= pieces:
        per = n // pieces  # images per chunk: each chunk's patches within the limit
        for a in range(0, n, per):
            size = min(per, n - a)
            parts.append(op(fn.narrow(x, 0, a, size), fn.narrow(g, 0, a, size), padding[0]))
    else:
        per = max(1, oh // pieces)  # output rows per chunk (one row may exceed the limit)
        (sh, _), (dh, _), top = stride, dilation, padding[0]
        for a in range(0, oh, per):
            b = min(a + per, oh)
            first = max(0, a * sh - top)  # the first x row chunk [a, b)'s taps read
            last = min(x.shape[2], (b - 1) * sh + (kernel[0] - 1) * dh + 1 - top)
            if last <= first:  # its taps read only padding: it adds nothing
                continue
            rows = fn.narrow(x, 2, first, last - first)
            parts.append(op(rows, fn.narrow(g, 2, a, b - a), max(0, top - a * sh)))
    if not parts:
        return op(x, g, padding[0])
    wide = x.dtype.itemsize < 4 and len(parts) > 1
    total = fn.astype(parts[0], float32) if wide else parts[0]
    for part in parts[1:]:
        total = total + (fn.astype(part, float32) if wide else part)
    return fn.astype(total, x.dtype) if wide else total


def split_weight_gradients(graph: Graph, limit: int) -> tuple[Graph, int]:
    """(`graph` with every conv2d_weight_backward whose patches exceed `limit` bytes
    replaced by its chunks' sum (`chunked_weight_gradient` at `limit`), the number of
    ops so split); `graph` itself when none is. The chunks take the replaced node's
    place in the order, so the result stays topological; ids are kept and new ones are
    above every existing id. The outputs' values change only by float reassociation."""
    work = graph.rebuilt(graph.nodes)
    made: dict[int, list[Node]] = {}
    mapping: dict[int, int] = {}
    for node in graph.nodes:
        if node.op != "conv2d_weight_backward":
            continue
        x, g = (Tensor(work, i) for i in node.inputs)
        kernel = tuple(node.attr("kernel_size"))
        if chunk_count(x, g, kernel, limit) == 1:
            continue
        first = len(work.nodes)
        attrs = (node.attr("stride"), tuple(node.attr("padding")), node.attr("dilation"))
        total = chunked_weight_gradient(x, g, kernel, *attrs, node.attr("groups"), limit)
        made[node.id] = list(work.nodes[first:])
        mapping[node.id] = total.id
    if not mapping:
        return graph, 0
    order = [m for node in graph.nodes for m in (*made.get(node.id, ()), work.node(node.id))]
    return work.rebuilt(order).replace_uses(mapping), len(mapping)
