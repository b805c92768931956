"""The arena-against-recompute trade-off of a training step, for `tensorgraph train
--plot`: a sweep of memory budgets through the public rematerialisation API, its printed
summary and its plot.

The sweep (`sweep_budgets`) compiles the step three ways, each point planned:
keep-everything (`tg.compile(step)`: no recompute), checkpoint-every-layer
(`tensorgraph.remat.compile_checkpointed`: only the layer inputs kept), and
`tg.compile(step, memory_budget=b)` for `points` distinct budgets spaced evenly below the
keep-everything arena down to checkpoint-every-layer's (the last budget is exactly that
arena, so the sweep's lowest point always fits). Why that range: above it keeping
everything already fits, and below it the answer is at most recompute-everything's
smaller arena, found only after a search that costs as much as the rest of the sweep.
Where checkpointing every layer does not shrink the arena (a model whose backward reads
only the layer inputs, as a relu perceptron's does), the budgets go down to
recompute-all's arena instead (`compile_checkpointed(step, "all")`, one compile, and a
point every budget search falls back on, so it fits), and where that does not shrink it
either, to half the keep-everything arena (the issue's reference point). A budget the
search cannot meet is reported with the smallest budget found feasible, never dropped
silently.

Every figure is the compiler's own: the placed arena (bytes) and the recompute FLOPs
(planner/flops.py's estimate) of `prog.remat`. Deterministic, as the compiler is.
"""

from __future__ import annotations

from pathlib import Path

from attrs import frozen

from tensorgraph.errors import PlanError
from tensorgraph.ir.graph import Graph


@frozen
class TradeoffPoint:
    """One planned point: `label` ("keep everything", "checkpoint every layer" or
    "budget"), the `budget` asked (bytes; None for the two fixed points), the placed
    `arena` (bytes), `recompute_flops` per step, the `method` that chose it and the
    solver's proven `gap` (None: no bound)."""

    label: str
    budget: int | None
    arena: int
    recompute_flops: int
    method: str
    gap: float | None


@frozen
class Sweep:
    """The fixed points `keep` and `layers`, the budget points `budgets` in falling
    budget order, `infeasible`: (budget, the PlanError's message) for each budget no
    point met, and `reach`: what the lowest budget is (module docstring)."""

    keep: TradeoffPoint
    layers: TradeoffPoint
    budgets: tuple[TradeoffPoint, ...]
    infeasible: tuple[tuple[int, str], ...]
    reach: str


def _point(label: str, budget: int | None, prog: object) -> TradeoffPoint:
    report = prog.remat
    if report is None:
        return TradeoffPoint(label, budget, prog.plan.arena_size, 0, "keep-all", 0.0)
    return TradeoffPoint(
        label, budget, prog.plan.arena_size, report.recompute_flops, report.method, report.gap
    )


def sweep_budgets(step: Graph, points: int, progress: object = None) -> Sweep:
    """The trade-off sweep of the gradient graph or training step `step` (module
    docstring) with `points` >= 1 budgets; `progress(done, total, text)`, when given, is
    called after each budget's compile."""
    import tensorgraph as tg
    from tensorgraph.remat import compile_checkpointed

    keep = _point("keep everything", None, tg.compile(step))
    layers = _point("checkpoint every layer", None, compile_checkpointed(step))
    floor, reach = layers.arena, "checkpoint-every-layer's"
    if floor >= keep.arena:
        floor, reach = compile_checkpointed(step, "all").plan.arena_size, "recompute-all's"
    if floor >= keep.arena:
        floor, reach = keep.arena // 2, "half of it"
    budgets = sorted(
        {keep.arena - (keep.arena - floor) * k // points for k in range(1, points + 1)}
    )
    found, infeasible = [], []
    for k, budget in enumerate(reversed(budgets), 1):
        try:
            found.append(_point("budget", budget, tg.compile(step, memory_budget=budget)))
        except PlanError as err:
            infeasible.append((budget, str(err)))
        if progress is not None:
            progress(k, len(budgets), f"budget {budget:,} B")
    return Sweep(keep, layers, tuple(found), tuple(infeasible), reach)


def sweep_lines(sweep: Sweep) -> list[str]:
    """The printed summary: one line per point, keep-everything first, then the budgets
    falling, then checkpoint-every-layer, then each budget no point met."""

    def line(p: TradeoffPoint) -> str:
        asked = "" if p.budget is None else f" {p.budget:,} B"
        gap = "no bound" if p.gap is None else f"gap {p.gap:.3g}"
        share = p.arena / max(sweep.keep.arena, 1)
        return (
            f"  {p.label}{asked}: arena {p.arena:,} B ({share:.2f}x), "
            f"recompute {p.recompute_flops:,} FLOPs ({p.method}, {gap})"
        )

    points = len(sweep.budgets) + len(sweep.infeasible)
    lines = [f"trade-off: {points} budgets from keep-everything's arena down to {sweep.reach}"]
    lines += [line(p) for p in (sweep.keep, *sweep.budgets, sweep.layers)]
    lines += [f"  budget {b:,} B: no point fits ({message})" for b, message in sweep.infeasible]
    return lines


def plot_tradeoff(sweep: Sweep, model: str, folder: Path) -> Path:
    """The sweep as `folder/<model>_tradeoff.png`: arena (y) against recompute FLOPs
    (x), the budget points joined in budget order, keep-everything and
    checkpoint-every-layer marked and labelled; folder created if missing.
    TensorGraphError when matplotlib is not installed."""
    from tensorgraph.planner.timeline import _pyplot, byte_label

    plt = _pyplot()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{model}_tradeoff.png"
    figure, axes = plt.subplots(figsize=(7, 4.5), dpi=100)
    curve = (sweep.keep, *sweep.budgets)
    axes.plot(
        [p.recompute_flops for p in curve],
        [p.arena for p in curve],
        marker="o",
        label="tg.compile(step, memory_budget=...)",
    )
    for point, marker, color in ((sweep.keep, "s", "tab:green"), (sweep.layers, "D", "tab:red")):
        axes.scatter(
            [point.recompute_flops],
            [point.arena],
            marker=marker,
            s=80,
            color=color,
            zorder=3,
            label=f"{point.label} ({byte_label(point.arena)})",
        )
    axes.set_xlabel("recompute per step (FLOPs, planner/flops.py estimate)")
    axes.set_ylabel("arena (bytes)")
    axes.set_title(f"tensorgraph train {model}: arena against recompute")
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path
