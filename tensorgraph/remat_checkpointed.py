"""The fixed points of rematerialisation, compiled as a budgeted compile would run them:
checkpoint-every-layer and recompute-all (`compile_checkpointed`). tensorgraph/remat.py
plans the same two as its fallbacks; this entry gives them apart, for the benches'
reference points and `tensorgraph train --plot`'s trade-off curve."""

from __future__ import annotations

from attrs import evolve

from tensorgraph.errors import GraphError
from tensorgraph.ir.graph import Graph
from tensorgraph.remat_report import RematReport


def compile_checkpointed(graph: Graph, recompute: str = "layers", **options: object) -> object:
    """`graph` compiled as checkpoint-every-layer would run it (`recompute="layers"`):
    every candidate recomputed except the layer inputs (the data operand of each forward
    matmul and convolution, `planner.remat.checkpoint_layers`), or with every candidate
    recomputed, a fresh copy at each read (`"all"`: the least memory the remat model
    knows, the floor `compile(graph, memory_budget=...)` reports when nothing fits),
    through the same rewrite, schedule and plan as a budgeted compile; `remat` reports
    its FLOPs and arena (method "checkpoint-layers" or "recompute-all"). `options` are
    `tg.compile`'s; GraphError for another `recompute`."""
    from tensorgraph.compiler import _finish, _rewrite, compile
    from tensorgraph.planner.remat import build_model, checkpoint_layers, rematerialize

    if recompute not in ("layers", "all"):
        raise GraphError(f"recompute must be 'layers' or 'all' but got {recompute!r}")
    keep = compile(graph, **options)
    opts = keep.options
    rewritten, stats = _rewrite(graph, opts, False)
    model = build_model(rewritten, opts.alignment, opts.analyses)
    everything = frozenset(model.candidates)
    chosen = checkpoint_layers(model) if recompute == "layers" else everything
    emit = model.emissions(chosen, frozenset() if recompute == "layers" else everything)
    prog = _finish(graph, rematerialize(rewritten, emit), stats, opts, None, False)
    kept = tuple(u for u in model.candidates if u not in emit)
    arena = prog.plan.arena_size
    report = RematReport(
        arena,
        "checkpoint-layers" if recompute == "layers" else "recompute-all",
        model.recompute_cost(chosen, emit),
        tuple(sorted(emit)),
        kept,
        None,
        arena,
        keep.plan.arena_size,
        0.0,
        len(emit),
    )
    return evolve(prog, remat=report)
