"""The `compiled` mode of the MLX executor: the whole schedule traced once as one
mx.compile'd function of the program's inputs, params and states.

Invariants: the trace computes the same values as the eager walk (the same lowerings,
constants folded in as mx.arrays); each guarded node's precondition comes out as a
verdict after the outputs and is raised, as the eager walk would raise it, once the
outputs are evaluated (guards.py). The trace is made once per program and device and
cached outside the program (program_cache.py); an `adopt`ed concrete program of a
symbolic one gets its trace from its owner instead (codegen_mlx/symbolic.py: one
shapeless trace for every length when every node is shapeless). Fast, but MLX allocates
every output at dispatch, so a run may hold most intermediates at once (the executor's
module docstring).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import mlx.core as mx

from tensorgraph.codegen_mlx.arrays import to_mx
from tensorgraph.codegen_mlx.guards import raise_if_broken, verdict
from tensorgraph.codegen_mlx.lowering import lowering_of
from tensorgraph.codegen_mlx.program_cache import _cache, _guarded, _in_range
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.ir.ops import OPS
from tensorgraph.runtime.kernels import constant_value


def trace_program(
    graph: Graph,
    feed_ids: tuple[int, ...],
    guarded: Sequence[Node],
    in_range: frozenset[int],
    *,
    shapeless: bool = False,
    overrides: Mapping[int, Callable] | None = None,
):
    """The whole schedule as one mx.compile'd function of the `feed_ids`' arrays: the
    outputs, then one verdict per `guarded` node. `shapeless` and `overrides` as in
    `segments.trace_segment`."""
    overrides = overrides or {}
    constants = {n.id: to_mx(constant_value(n)) for n in graph.nodes if n.op == "constant"}
    steps = [
        (n, overrides.get(n.id) or lowering_of(n, in_range))
        for n in graph.nodes
        if not OPS[n.op].boundary
    ]

    def program(*feeds: mx.array) -> list[mx.array]:
        slots = dict(zip(feed_ids, feeds, strict=True))
        slots.update(constants)
        for node, lower in steps:
            if node.id not in slots:
                slots[node.id] = lower(node, [slots[i] for i in node.inputs])
        verdicts = [verdict(n, [slots[i] for i in n.inputs]) for n in guarded]
        return [slots[o] for o in graph.outputs] + verdicts  # verdicts: see guards.py

    return mx.compile(program, shapeless=shapeless)


def run_compiled(program: object, feeds: dict[int, mx.array], device: mx.Device) -> list[mx.array]:
    """Run the cached `mx.compile`d trace of the whole schedule."""
    graph = program.graph
    cache = _cache(program)
    key = f"compiled-{device}"
    if key not in cache and cache.get("compiled-source") is not None:
        cache[key] = cache["compiled-source"](program, device)
    if key not in cache:
        feed_ids = tuple(n.id for n in graph.nodes if n.op in ("input", "param", "state"))
        trace = trace_program(graph, feed_ids, _guarded(program), _in_range(program))
        cache[key] = (feed_ids, trace)
    feed_ids, trace = cache[key]
    outputs = trace(*(feeds.pop(i) for i in feed_ids))
    feeds.clear()
    mx.eval(outputs)
    count = len(graph.outputs)
    for node, outcome in zip(_guarded(program), outputs[count:], strict=True):
        raise_if_broken(node, outcome)
    return outputs[:count]
