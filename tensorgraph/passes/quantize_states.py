"""Quantized state: float states (KV caches) held quantized in the state region, for
any graph whose caches are written by `slice_update` / `index_update` (an imported
transformers model's static cache, say), with no per-model code.

`quantize_states(graph, bits=8, group_size=64)` replaces each float state S of shape
(..., D), D a multiple of `group_size`, by the states `S` (uint32 codes), `S.scales`
and `S.biases` laid out as `mx.quantize` lays them out along D (mlx-lm's
`QuantizedKVCache` layout). The steps, for one graph, in node order:

1. S itself reads as its parts.
2. A write into a quantized value, `slice_update(target, rows, ...)` or
   `index_update(target, rows, index, ...)` along an axis other than the last,
   quantizes `rows` (`quantize_rows`) and writes each part at the same place: the
   result is again a quantized value, its parts the three writes.
3. Any other reader of a quantized value (attention, say) reads one `dequantize` of
   it, made once per value: what the cache holds is the quantized rows, and every
   read sees exactly that.
4. The state's update becomes the updates of its three parts.

Semantics: a program whose every read of the cache is of what was written, rounded
to `bits`; the reference interpreter defines it (the arena follows bit for bit, MLX
within rounding). The state region shrinks to bits/32 + 2 * 32/(32 * group) of the
float32 cache (0.28x at 8 bits, group 64). A read dequantizes the whole cache into
the arena for the step (a transient, planned buffer): the trade-off for taking any
attention as it was imported (the zoo Llama's `kv_bits` instead attends through
`quantized_matmul` without it). A state whose last axis the group does not divide, or
written another way, stays float and `stats["kept"]` says why.
"""

from __future__ import annotations

from collections.abc import Mapping

from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node, describe
from tensorgraph.ir.quantized import QUANTIZE_PARTS, check_quantization
from tensorgraph.passes.result import PassResult

WRITES = {"slice_update": 1, "index_update": 1}  # op -> operand slot of the rows


def _reason(graph: Graph, state: Node, group_size: int) -> str | None:
    """Why `state` cannot be quantized (None when it can)."""
    if not state.dtype.is_float:
        return f"dtype {state.dtype} is not a float"
    if state.name in graph.state_values:  # a trained weight, not a cache
        return "it starts from an initial value, not zeros"
    if not state.shape or state.shape[-1] % group_size:
        return f"last axis of {state.shape} is not a multiple of the group size {group_size}"
    users = graph.users()
    frontier, seen = [state.id], set()
    while frontier:  # every write chain from the state must be along another axis
        value = frontier.pop()
        seen.add(value)
        for user in users[value]:
            node = graph.node(user)
            if node.op in WRITES and node.inputs[0] == value and user not in seen:
                if node.attr("axis") == len(state.shape) - 1:
                    return f"{describe(node)} writes along the quantized last axis"
                frontier.append(user)
    update = graph.state_updates.get(state.name)
    if update is not None and update not in seen:  # its new value is not a chain of writes
        return f"its update {describe(graph.node(update))} is not a write into it"
    return None


def quantize_states(
    graph: Graph | Mapping[str, Graph], bits: int = 8, group_size: int = 64
) -> Graph | dict[str, Graph]:
    """`graph` (or each graph of a mapping of entries, which share states by name) with
    its float states quantized (see the module docstring); of entries, a state that
    one entry cannot quantize stays float in all (they share its layout). ShapeError
    for a width or group MLX's affine quantization does not take."""
    if isinstance(graph, Graph):
        return quantize_graph_states(graph, bits, group_size).graph
    kept: dict[str, str] = {}
    for name, entry in graph.items():
        for state in entry.states:
            reason = _reason(entry, state, group_size)
            if reason is not None:
                kept.setdefault(state.name, f"{reason} in {name!r}")
    return {
        name: quantize_graph_states(g, bits, group_size, kept).graph for name, g in graph.items()
    }


def quantize_graph_states(
    graph: Graph, bits: int = 8, group_size: int = 64, keep: Mapping[str, str] | None = None
) -> PassResult:
    """The rewrite as a pass; the states named in `keep` stay float (for the reason
    given there). Counters: `quantized` (states now quantized) and `kept`: state name
    -> why it stayed float."""
    check_quantization("affine", bits, group_size)
    options = {"group_size": group_size, "bits": bits, "mode": "affine"}
    kept = {}
    chosen = set()
    for state in graph.states:
        reason = (keep or {}).get(state.name) or _reason(graph, state, group_size)
        if reason is None:
            chosen.add(state.id)
        else:
            kept[state.name] = reason
    if not chosen:
        return PassResult(graph, {"quantized": 0, "kept": kept})
    new = Graph(graph.name)
    ids: dict[int, int] = {}
    parts: dict[int, tuple[int, ...]] = {}  # old id of a quantized value -> its part ids
    floats: dict[int, int] = {}  # old id of a quantized value -> its dequantized new id
    for node in graph.nodes:
        if node.id in chosen:
            parts[node.id] = _part_states(new, node, bits, group_size)
        elif node.op in WRITES and node.inputs[0] in parts:
            rows = _read(new, graph, node.inputs[WRITES[node.op]], ids, parts, floats, options)
            codes = [
                new.add("quantize", (rows,), {**options, "part": part}).id
                for part in QUANTIZE_PARTS
            ]
            rest = [_read(new, graph, i, ids, parts, floats, options) for i in node.inputs[2:]]
            parts[node.id] = tuple(
                new.add(node.op, (target, code, *rest), node.attr_dict).id
                for target, code in zip(parts[node.inputs[0]], codes, strict=True)
            )
        else:
            inputs = [_read(new, graph, i, ids, parts, floats, options) for i in node.inputs]
            ids[node.id] = new.add(node.op, inputs, node.attr_dict).id
            if node.op == "param" and node.name in graph.param_values:
                new.param_values[node.name] = graph.param_values[node.name]
    outputs, positions = _outputs(graph, ids, parts, floats, new, options)
    result = Graph.from_nodes(  # only kept states have initial values (see _reason)
        graph.name, new.nodes, outputs, new.param_values, positions, graph.state_values
    )
    return PassResult(result, {"quantized": len(chosen), "kept": kept})


def _part_states(new: Graph, state: Node, bits: int, group_size: int) -> tuple[int, ...]:
    """The new ids of `state`'s three part states."""
    *lead, width = state.shape
    shapes = ((*lead, width * bits // 32), (*lead, width // group_size))
    specs = (
        (state.name, shapes[0], "uint32"),
        (f"{state.name}.scales", shapes[1], state.dtype.name),
        (f"{state.name}.biases", shapes[1], state.dtype.name),
    )
    return tuple(
        new.add("state", (), {"name": name, "shape": shape, "dtype": dtype}).id
        for name, shape, dtype in specs
    )


def _read(
    new: Graph,
    graph: Graph,
    old: int,
    ids: dict,
    parts: dict,
    floats: dict,
    options: dict,
) -> int:
    """The new id a reader of old value `old` reads: the value itself, or for a
    quantized value its dequantization (made once)."""
    if old not in parts:
        return ids[old]
    if old not in floats:
        dtype = graph.node(old).dtype.name
        floats[old] = new.add("dequantize", parts[old], {**options, "dtype": dtype}).id
    return floats[old]


def _outputs(
    graph: Graph, ids: dict, parts: dict, floats: dict, new: Graph, options: dict
) -> tuple[list[int], dict[str, int]]:
    """The new outputs and state positions: a quantized state's update becomes its
    three parts' updates (the codes at the old position, the others appended)."""
    outputs: list[int] = []
    updated = {position: name for name, position in graph.state_positions.items()}
    positions: dict[str, int] = {}
    extra: list[tuple[str, int]] = []
    for position, old in enumerate(graph.outputs):
        name = updated.get(position)
        if name is not None and old in parts:
            codes, scales, biases = parts[old]
            positions[name] = len(outputs)
            outputs.append(codes)
            extra += [(f"{name}.scales", scales), (f"{name}.biases", biases)]
            continue
        if name is not None:
            positions[name] = len(outputs)
        outputs.append(_read(new, graph, old, ids, parts, floats, options))
    for name, value in extra:
        positions[name] = len(outputs)
        outputs.append(value)
    return outputs, positions
