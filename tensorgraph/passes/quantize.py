"""Weight quantization: float params read as matmul weights or embedding tables become
quantized params (packed codes, scales, biases; `ir.quantized`), laid out exactly as
`mx.quantize` lays them out, so an mlx-lm checkpoint's arrays bind as they are.

Invariants: every output keeps its shape and dtype, and its value up to the weights'
quantization error (a matmul reads the dequantized weight); the float weight of a
quantized param is never held again (no use reads it; `fold` never folds a
`dequantize`). The steps, for each float param of two axes, bound or fed at run time:

1. Its uses. `matmul(x, transpose(P))` (torch's Linear: P is (N, K)) and `take(P, ids,
   axis=0)` (an embedding: P is (V, D)) read P by rows: P is quantized as it is, along
   its last axis. `matmul(x, P)` (P is (K, N)) reads it by columns: P.T is quantized,
   along K. Groups always run along the reduction axis, as MLX's layout wants.
2. The orientation that serves the most uses wins (rows on a tie). A param with no
   such use, or whose quantized axis the group size does not divide, stays as it is,
   and `stats["kept"]` says why.
3. Rewrite: each served matmul becomes `quantized_matmul(x, w, scales, biases,
   transpose=True)`, each served take a `quantized_take`; every other use reads one
   `dequantize` of the param (transposed back for a column-quantized one), computed at
   run time.
4. A bound param whose quantized arrays equal another's (a tied embedding and output
   head, even when the import folded the head's transpose into a second copy) is
   stored once: the second reads the first's params.

Names: the packed codes take the param's name, `{name}.scales` and `{name}.biases` the
rest, so prequantized arrays are passed under those names at run time (for a
column-quantized param: the quantization of P.T, MLX's (N, K) layout).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import numpy as np

from tensorgraph.ir.dtypes import as_dtype
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.passes.dce import dce
from tensorgraph.passes.result import PassResult
from tensorgraph.runtime import quant_kernels
from tensorgraph.runtime.quant_kernels import QuantSpec, check_spec, unquantizable

ROWS, COLUMNS = "rows", "columns"


def _use(graph: Graph, node: Node, param: int) -> tuple[str, Node] | None:
    """(orientation, the node to rewrite) when `node` reads `param` as a weight or table."""
    if node.op == "take" and node.inputs[0] == param and node.attr("axis") == 0:
        return ROWS, node
    if node.op == "matmul" and node.inputs[1] == param and node.inputs[0] != param:
        return COLUMNS, node
    if node.op == "transpose" and node.inputs == (param,) and node.attr("axes") == (1, 0):
        return ROWS, node  # served when every reader of the transpose is a matmul weight
    return None


def _served(graph: Graph, users: Mapping[int, list[int]], use: tuple) -> bool:
    """Whether a quantized op can take `use` over: a matmul whose x is a float of the
    product's dtype (quantized_matmul keeps x's dtype), a take, or a transpose read
    only by such matmuls as their weight."""
    _, node = use
    if node.op == "matmul":
        x = graph.node(node.inputs[0])
        return x.dtype == node.dtype and x.dtype.is_float
    if node.op == "transpose":
        if node.id in graph.outputs:  # returned as it is: it must exist
            return False
        readers = [graph.node(u) for u in users[node.id]]
        return bool(readers) and all(
            r.op == "matmul"
            and r.inputs[1] == node.id
            and r.inputs[0] != node.id
            and _served(graph, users, (COLUMNS, r))
            for r in readers
        )
    return True


def quantize_weights(
    graph: Graph,
    bits: int = 4,
    group_size: int = 64,
    mode: str = "affine",
    memo: dict | None = None,
) -> PassResult:
    """The rewrite (module docstring). Counters: `quantized` (params now quantized),
    `tied` (stored once with another), `bytes_before` / `bytes_after` (the bound
    params' bytes), and `kept`: param name -> why it stayed float. Graphs rewritten with
    one `memo` dict (the entries of one program) get the very same quantized arrays for
    a weight they share, so the program still stores it once."""
    spec = check_spec(mode, bits, group_size)
    users = graph.users()
    chosen: dict[int, tuple[str, list[Node]]] = {}
    kept: dict[str, str] = {}
    for param in graph.params:
        if not param.dtype.is_float or len(param.shape) != 2:
            continue
        uses = [_use(graph, graph.node(u), param.id) for u in users[param.id]]
        served = [u for u in uses if u is not None and _served(graph, users, u)]
        if not served:
            kept[param.name] = "not read as a matmul weight or an embedding table"
            continue
        rows = sum(o == ROWS for o, _ in served)
        orientation = ROWS if rows * 2 >= len(served) else COLUMNS
        shape = param.shape if orientation == ROWS else param.shape[::-1]
        reason = unquantizable(shape, param.dtype.to_numpy(), spec)
        if reason is not None:  # the shape is oriented: its last axis is the reduction's
            kept[param.name] = reason.replace("last axis", "reduction axis")
            continue
        chosen[param.id] = (orientation, [n for o, n in served if o == orientation])
    if not chosen:
        return PassResult(graph, _stats(graph, graph, 0, 0, kept))
    result, tied = _rewrite(graph, users, spec, chosen, {} if memo is None else memo)
    return PassResult(result, _stats(graph, result, len(chosen), tied, kept))


def _stats(before: Graph, after: Graph, quantized: int, tied: int, kept: dict) -> dict:
    size = lambda g: sum(v.nbytes for v in g.param_values.values())  # noqa: E731
    return {
        "quantized": quantized,
        "tied": tied,
        "bytes_before": size(before),
        "bytes_after": size(after),
        "kept": kept,
    }


def _rewrite(
    graph: Graph, users: Mapping[int, list[int]], spec: QuantSpec, chosen: dict, memo: dict
) -> tuple[Graph, int]:
    """(the rewritten graph, how many params were stored once with another)."""
    new = Graph(graph.name)
    ids: dict[int, int] = {}  # old id -> new id
    quantized: dict[int, tuple] = {}  # old param id -> (orientation, new part ids)
    stored: dict[bytes, tuple] = {}  # bound arrays' digest -> new part ids
    rewritten: dict[int, int] = {}  # old use id -> old param id
    dropped: set[int] = set()  # served transposes: their matmuls read the params
    for param_id, (_, served) in chosen.items():
        for node in served:
            if node.op == "transpose":
                dropped.add(node.id)
                rewritten.update({reader: param_id for reader in users[node.id]})
            else:
                rewritten[node.id] = param_id
    options = {"group_size": spec.group_size, "bits": spec.bits, "mode": spec.mode}
    tied = 0
    dequantized: dict[int, int] = {}  # old param id -> new id of its float value
    for node in graph.nodes:
        if node.id in chosen:
            orientation, parts = _quantized_params(new, graph, node, spec, chosen, stored, memo)
            tied += parts[1]
            quantized[node.id] = (orientation, parts[0])
            continue
        if node.id in dropped:
            continue
        param_id = rewritten.get(node.id)
        if param_id is not None:
            ids[node.id] = _quantized_use(new, node, ids, quantized[param_id], options)
            continue
        inputs = []
        for i in node.inputs:
            if i in quantized:  # a use no quantized op serves: the dequantized value
                if i not in dequantized:
                    dequantized[i] = _dequantized(new, graph.node(i), quantized[i], options)
                inputs.append(dequantized[i])
            else:
                inputs.append(ids[i])
        added = new.add(node.op, inputs, node.attr_dict)
        ids[node.id] = added.id
        if node.op == "param" and node.name in graph.param_values:
            new.param_values[node.name] = graph.param_values[node.name]
    outputs = []
    for o in graph.outputs:  # a quantized weight returned as an output: its float value
        if o in quantized and o not in dequantized:
            dequantized[o] = _dequantized(new, graph.node(o), quantized[o], options)
        outputs.append(dequantized[o] if o in quantized else ids[o])
    result = Graph.from_nodes(
        graph.name, new.nodes, outputs, new.param_values, graph.state_positions, graph.state_values
    )
    return dce(result).graph, tied


def _quantized_params(
    new: Graph,
    graph: Graph,
    param: Node,
    spec: QuantSpec,
    chosen: dict,
    stored: dict,
    memo: dict,
) -> tuple[str, tuple[tuple[int, ...], int]]:
    """(orientation, ((new ids of packed, scales[, biases]), 1 if tied else 0))."""
    orientation = chosen[param.id][0]
    value = graph.param_values.get(param.name)
    if value is not None:
        key = (id(value), orientation, spec)
        if key not in memo:  # the value is kept with its parts, so its id is never reused
            weight = np.asarray(value) if orientation == ROWS else np.ascontiguousarray(value.T)
            quantized = quant_kernels.quantize(weight, spec)
            memo[key] = (value, [p for p in quantized if p is not None])
        parts = memo[key][1]
        digest = hashlib.sha256(b"".join(p.tobytes() for p in parts)).digest()
        digest += repr([(p.shape, p.dtype.str) for p in parts]).encode()
        if digest in stored:
            return orientation, (stored[digest], 1)
    shape = param.shape if orientation == ROWS else param.shape[::-1]
    names = (param.name, f"{param.name}.scales", f"{param.name}.biases")
    shapes = (spec.packed_shape(shape), spec.scales_shape(shape), spec.scales_shape(shape))
    scale_dtype = param.dtype if spec.has_biases else as_dtype("uint8")
    dtypes = ("uint32", scale_dtype, param.dtype)
    count = 3 if spec.has_biases else 2
    new_ids = []
    for k in range(count):
        attrs = {"name": names[k], "shape": shapes[k], "dtype": as_dtype(dtypes[k]).name}
        new_ids.append(new.add("param", (), attrs).id)
        if value is not None:
            new.param_values[names[k]] = parts[k]
    if value is not None:
        stored[digest] = tuple(new_ids)
    return orientation, (tuple(new_ids), 0)


def _quantized_use(new: Graph, node: Node, ids: dict, quantized: tuple, options: dict) -> int:
    """The new id of a served use rewritten onto the quantized params."""
    _, parts = quantized
    if node.op == "take":
        taken = [new.add("take", (p, ids[node.inputs[1]]), {"axis": 0}).id for p in parts]
        attrs = {**options, "dtype": node.dtype.name}
        return new.add("dequantize", taken, attrs).id
    # a matmul reading P (its columns: P.T quantized) or transpose(P) (its rows): both
    # are x @ W.T for the quantized (N, K) weight W
    attrs = {**options, "transpose": True, "dtype": node.dtype.name}
    return new.add("quantized_matmul", (ids[node.inputs[0]], *parts), attrs).id


def _dequantized(new: Graph, param: Node, quantized: tuple, options: dict) -> int:
    """The new id of `param`'s float value, dequantized (and transposed back)."""
    orientation, parts = quantized
    value = new.add("dequantize", parts, {**options, "dtype": param.dtype.name}).id
    if orientation == COLUMNS:
        value = new.add("transpose", (value,), {"axes": (1, 0)}).id
    return value


def quantize(
    graph: Graph | Mapping[str, Graph], bits: int = 4, group_size: int = 64, mode: str = "affine"
) -> Graph | dict[str, Graph]:
    """`graph` with its matmul weights and embedding tables quantized (see the module
    docstring; `quantize_weights` gives the counters, with why a param stayed float),
    or each graph of a mapping of entries, sharing the quantized arrays of the weights
    they share. ShapeError for a mode, width or group size MLX does not accept."""
    if isinstance(graph, Graph):
        return quantize_weights(graph, bits, group_size, mode).graph
    memo: dict = {}
    return {
        name: quantize_weights(g, bits, group_size, mode, memo).graph for name, g in graph.items()
    }
