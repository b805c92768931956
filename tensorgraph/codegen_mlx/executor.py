"""Run a compiled Program on MLX, following its memory plan.

Two modes:

- `eager`: walk the schedule, evaluate each step, and drop every value right after its
  last use (the plan's liveness), so MLX's allocator frees buffers when the plan says.
  Operands that die at a step are dropped *before* the op runs, so the op holds the only
  reference and MLX can donate the buffer to an elementwise output: that is exactly the
  plan's in-place reuse. Memory follows the plan step by step.
- `compiled`: the whole schedule traced once into an `mx.compile`d function (cached on
  the program per device), which lets MLX fuse elementwise chains and skip Python.

`auto` (the default) is `compiled`: on the Llama benchmark it is the faster mode and its
peak memory stays within the plan's bound (MLX frees a compiled graph's intermediates
as it goes and fuses elementwise chains, which needs fewer buffers than the plan, not
more); see benches/README.md for the figures. `eager` is the mode to use when memory
must follow the plan step by step (it is what the memory test measures).
"""

from __future__ import annotations

from collections.abc import Mapping

import ml_dtypes
import mlx.core as mx
import numpy as np

from tensorgraph.codegen_mlx.lowering import LOWERINGS
from tensorgraph.errors import RunError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.ops import OPS
from tensorgraph.runtime.feeds import bind_feeds
from tensorgraph.runtime.kernels import constant_value

MODES = ("auto", "eager", "compiled")


def to_mx(array: np.ndarray) -> mx.array:
    """A NumPy array as an MLX array of the same dtype (bfloat16 via float32, exact)."""
    if array.dtype == ml_dtypes.bfloat16:
        return mx.array(array.astype(np.float32)).astype(mx.bfloat16)
    return mx.array(np.ascontiguousarray(array))


def to_numpy(value: mx.array) -> np.ndarray:
    """An MLX array as a fresh NumPy array of the same dtype (bfloat16 via float32)."""
    if value.dtype == mx.bfloat16:
        return np.array(value.astype(mx.float32)).astype(ml_dtypes.bfloat16)
    return np.array(value, copy=True)


def _device(device: str | None) -> mx.Device:
    if device is None:
        return mx.default_device()
    if device not in ("cpu", "gpu"):
        raise RunError(f"unknown MLX device {device!r}; choose 'cpu' or 'gpu'")
    return mx.cpu if device == "cpu" else mx.gpu


def _boundary_values(graph: Graph, feeds: dict[int, np.ndarray]) -> dict[int, mx.array]:
    values = {node_id: to_mx(array) for node_id, array in feeds.items()}
    for node in graph.nodes:
        if node.op == "constant":
            values[node.id] = to_mx(constant_value(node))
    return values


def run_eager(
    graph: Graph, last_use: Mapping[int, int], values: dict[int, mx.array]
) -> list[mx.array]:
    """Evaluate step by step, dropping each value after `last_use` (see module doc)."""
    outputs = set(graph.outputs)
    slots: dict[int, mx.array] = {}
    for step, node in enumerate(graph.nodes):
        if OPS[node.op].boundary:
            slots[node.id] = values[node.id]
            continue
        args = [slots[i] for i in node.inputs]
        for i in dict.fromkeys(node.inputs):
            if last_use[i] == step and i not in outputs:
                del slots[i]  # the op now holds the only reference: MLX may donate it
        result = LOWERINGS[node.op](node, args)
        del args
        mx.eval(result)
        if last_use[node.id] != -1 or node.id in outputs:
            slots[node.id] = result
    return [slots[o] for o in graph.outputs]


def _trace(graph: Graph, feed_ids: tuple[int, ...]):
    constants = {n.id: to_mx(constant_value(n)) for n in graph.nodes if n.op == "constant"}

    def program(*feeds: mx.array) -> list[mx.array]:
        slots = dict(zip(feed_ids, feeds, strict=True))
        slots.update(constants)
        for node in graph.nodes:
            if node.id not in slots:
                slots[node.id] = LOWERINGS[node.op](node, [slots[i] for i in node.inputs])
        return [slots[o] for o in graph.outputs]

    return mx.compile(program)


def run_compiled(program: object, feeds: dict[int, mx.array], device: mx.Device) -> list[mx.array]:
    """Run the cached `mx.compile`d trace of the whole schedule."""
    graph = program.graph
    feed_ids = tuple(n.id for n in graph.nodes if n.op in ("input", "param"))
    cache = program.backend_cache.setdefault("mlx", {})
    key = str(device)
    if key not in cache:
        cache[key] = _trace(graph, feed_ids)
    outputs = cache[key](*(feeds[i] for i in feed_ids))
    mx.eval(outputs)
    return outputs


def run_mlx(
    program: object,
    inputs: Mapping[str, object],
    params: Mapping[str, object] | None = None,
    *,
    mode: str = "auto",
    device: str | None = None,
) -> list[np.ndarray]:
    """The program's outputs computed with MLX, as NumPy arrays with their dtypes.

    `mode` is one of MODES; `device` None uses MLX's default (Metal GPU on Apple
    silicon, CPU on Linux), or "cpu" / "gpu". RunError on bad feeds or arguments."""
    if mode not in MODES:
        raise RunError(f"unknown MLX mode {mode!r}; choose one of {', '.join(MODES)}")
    graph = program.graph
    feeds = bind_feeds(graph, inputs, params)
    target = _device(device)
    with mx.stream(target):
        values = _boundary_values(graph, feeds)
        if mode == "eager":
            results = run_eager(graph, program.plan.liveness.last_use, values)
        else:
            results = run_compiled(program, values, target)
        return [to_numpy(r) for r in results]
