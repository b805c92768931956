"""Rematerialisation under a memory budget: the driver of `tg.compile(graph,
memory_budget=bytes)` for a gradient graph or a training step.

Cost model: the FLOPs of every copy of a recomputed node (planner/flops.py: matmul 2*M*N*K,
convolution 2 * outputs * C_in/groups * kh * kw, attention its two matmuls and softmax,
normalisations 5 per element, reductions 1 per input element, elementwise 1 per
element, layout and view ops 0); a value copied twice costs twice. Memory: the arena
the planner places.

Steps:
1. plan the graph keeping every value (today's program, scheduled for the lowest
   peak); if its arena does not fit the budget, split every convolution weight gradient
   whose patches exceed 1 / SPLIT_SHARE of the budget into chunks of at most that
   (ir/conv_grad_chunks.py: the same FLOPs, a smaller workspace, so it comes before any
   recompute; the report's `split` says how many) and plan again; if the arena fits the
   budget, that is the answer (method "keep-all");
2. build the memory model (planner/remat.py: the planner's liveness on the program
   order, views resolved, no in-place writes) and scale the budget by the model's to
   the planner's keep-everything peak (the model does not see reinplacing);
3. for a model budget (first the scaled one), take the points (`choices`) whose
   model peak fits of: the integer program (planner/remat_milp.py, HiGHS under a
   node limit: a value may be recomputed several times, freed in between;
   only up to MAX_VARIABLES), its single-copy restriction (planner/remat_single.py:
   one copy per recomputed value, from its first to its last backward reader; HiGHS
   certifies it on graphs whose full program is too large to solve) and the
   heuristic (greedy, relaxing from the least memory, the segment-checkpointing
   family, and tightening at the peak, where a copy may be split in two), fewest
   FLOPs first (on a tie the full program, then the single-copy
   one); plan the cheapest, and where its arena does not fit the others that could
   still win, up to the first that fits (they never move the bisection). The report's
   gap is that of the program the point came from, on that program's model: method
   "milp" bounds every multi-copy point, "milp-single" only the single-copy ones;
4. rewrite (copies emitted before their backward readers), schedule (with the smaller
   search budget TRIAL_SCHEDULE_BUDGET), plan, and bisect the model budget on whether
   the placed arena fits (MAX_ATTEMPTS points at most, the first within the bracket:
   no less than the least memory the model knows), keeping the fitting point of
   fewest FLOPs; the single-copy program runs under TRIAL_SINGLE_NODE_LIMIT nodes at
   each trial above the largest at which it found no point and, where that cut it
   short at the model budget the point was chosen at, once more there with its full
   node limit (a cheaper point it finds is planned, and it states the gap of a
   single-copy answer); where the full program was too
   large to solve at every trial, solve it once at that model budget too (up to
   CERTIFY_MAX_VARIABLES): its dual bound gives the report's `full_gap`, and a cheaper
   point it finds is planned;
5. the level search (planner/remat_levels.py): a second model, counted on the order the
   scheduler chose for recompute-all (induced on the graph's nodes), whose points are
   held per step to a level bisected on the placed arena and rewritten in that order;
   its point is taken where it costs fewer FLOPs (method "greedy", no gap: the
   certificate is the first model's);
6. plan the fixed fallbacks too, checkpoint-every-layer (keep only the inputs of each
   forward matmul and convolution, each recomputed segment copied once) and
   recompute-all (every candidate recomputed, a fresh copy at each read: the least
   memory the model knows), and answer the fitting point of fewest FLOPs (then smallest
   arena), scheduled again with the full search budget (that program where its arena
   fits, else the trial's); if none fits, PlanError naming the smallest arena among
   keep-all and the fallbacks: compiling with that budget succeeds.
Deterministic: every search counts work (HiGHS nodes, greedy evaluations), never time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from attrs import evolve

from tensorgraph.errors import PlanError
from tensorgraph.ir.conv_grad_chunks import split_weight_gradients
from tensorgraph.ir.graph import Graph
from tensorgraph.remat_checkpointed import compile_checkpointed
from tensorgraph.remat_report import METHODS, RematReport

# The report and the fixed points lived here: program.py, program_io.py, the benches and
# the tests import them from this module.
__all__ = [
    "MAX_ATTEMPTS",
    "METHODS",
    "SPLIT_SHARE",
    "TRIAL_SCHEDULE_BUDGET",
    "TRIAL_SINGLE_NODE_LIMIT",
    "RematReport",
    "check_budget",
    "choices",
    "choose",
    "compile_checkpointed",
    "compile_to_budget",
    "proven",
    "solve_all",
]

if TYPE_CHECKING:
    from tensorgraph.planner.remat import RematModel
    from tensorgraph.planner.remat_milp import Certificate, RematChoice

MAX_ATTEMPTS = 5
# Under a budget, a convolution weight gradient's patches are split to at most this
# fraction of it (step 1). A workspace is one step's, beside what that step must hold
# (the op's x and g, the values live across it), and the split costs no FLOPs, only
# more, smaller ops. Measured on the zoo CNN's step at half its keep-everything arena
# (1,142,816 B; its 7x7 stem's one-image chunks hold 0.6 MB of patches, and the least
# plan was 1.41 MB, above the budget): a half gives 0.3 MB chunks and a point of
# 72.8M recompute FLOPs (593 s to compile), a quarter 0.19 MB chunks and 63.4M FLOPs
# (909 nodes against 795: 842 s; both compiles with an earlier, costlier schedule).
SPLIT_SHARE = 4
# The schedule search's work budget (planner/schedule.py's units) for the points the
# bisection tries. A point that fits its budget so is taken as fitting; one that does
# not is scheduled again with the full budget (the compile's, DEFAULT_BUDGET by
# default) before the bisection calls it too big, so no point the full search would
# fit is turned down; the answer, where it was planned with the trial budget, is
# scheduled again with the full budget too, and that program is taken where its arena
# fits, else the trial's. The local search is first-improvement from the same start,
# so a smaller budget stops the same trajectory earlier. Measured (quiet machine): the
# search converges after 42,000-53,000 units on the small GPT-2's step (2.5 s a plan)
# and 104,000 on the ResNet-18's (10.6 s); at 5,000 units (the three builders' orders
# and little search) a plan takes 1.4 s and 1.7 s, and the ResNet-18 keep-everything
# arena is 0.7% larger.
TRIAL_SCHEDULE_BUDGET = 5_000
# Branch-and-bound nodes of the single-copy program at each bisection trial; at the
# answer's model budget, where this limit cut the search short, it is solved again with
# its full limit (SINGLE_NODE_LIMIT), which certifies the point or finds a cheaper one.
# The search finds its points early and spends the rest proving them: on Llama's step
# at a model budget of 1,989,000 B the optimum (13,058,048 FLOPs) was found at node 196
# (17.8 s; 13,062,144 at node 0) and proven at node 1,389 (70.8 s); GPT-2's halfway
# optimum at the root's end (4.7 s), proven at node 95 (14.8 s). Where the program is
# infeasible but its relaxation is not, the full limit ran for more than 8 minutes (GPT-2
# near its half budget): a trial stops after this many nodes and takes the other
# methods' points. Trade-off: a single-copy point that needs more nodes than this to be
# found is found only at the answer's model budget.
TRIAL_SINGLE_NODE_LIMIT = 200


def check_budget(budget: object) -> None:
    """PlanError unless `budget` is a positive int (bytes)."""
    if isinstance(budget, bool) or not isinstance(budget, int) or budget <= 0:
        raise PlanError(f"memory_budget must be a positive int (bytes) but got {budget!r}")


def choices(model: RematModel, budget: int) -> list[RematChoice]:
    """`solve_all(model, budget)`'s points."""
    return solve_all(model, budget)[0]


def solve_all(
    model: RematModel,
    budget: int,
    single_node_limit: int | None = None,
    with_single: bool = True,
) -> tuple[list[RematChoice], Certificate, RematChoice | None]:
    """The points the full integer program (when at most MAX_VARIABLES), the
    single-copy program (when at most SINGLE_MAX_VARIABLES and `with_single`, under
    `single_node_limit` branch-and-bound nodes, None: SINGLE_NODE_LIMIT) and the
    heuristic answer
    for a model budget of `budget` bytes, fewest FLOPs first (on a tie the full
    program, then the single-copy one), each distinct set of copies once. Each fits
    its own method's rows, and each method's rows bound `RematModel.profile`'s peak
    from above, so every point's `peak` is at most `budget`; the profile is only an
    estimate of the planner's liveness: the driver plans each point it takes and keeps
    it only if the placed arena fits. The
    single-copy program is solved even where the full one certifies: the two bound the
    model's liveness differently, so neither's rows contain all the other's points, and
    it is cheap wherever the full one is small enough. Deterministic (node and work
    limits). Also the full program's `Certificate` (its bound None where it has more
    than MAX_VARIABLES variables and was not solved), and the single-copy program's
    point (None: none found, or not searched: `with_single` False)."""
    from tensorgraph.planner.remat_milp import certify, solve_greedy
    from tensorgraph.planner.remat_single import SINGLE_NODE_LIMIT, solve_single_copy

    certificate = certify(model, budget)
    limit = SINGLE_NODE_LIMIT if single_node_limit is None else single_node_limit
    single = solve_single_copy(model, budget, limit) if with_single else None
    found = (certificate.point, single)
    fit = [c for c in (*found, solve_greedy(model, budget)) if c is not None]
    rank = {"milp": 0, "milp-single": 1, "greedy": 2}
    fit.sort(key=lambda c: (c.flops, rank[c.method]))
    seen: set[frozenset] = set()
    out = []
    for c in fit:
        key = frozenset(c.emit.items())
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out, certificate, single


def choose(model: RematModel, budget: int) -> RematChoice | None:
    """The first of `choices(model, budget)`: never more FLOPs than the single-copy
    program's point; None when no method finds one."""
    found = choices(model, budget)
    return found[0] if found else None


def compile_to_budget(
    rewritten: Graph,
    budget: int,
    alignment: int,
    analyses: tuple[str, ...],
    finish: Callable[..., object],
) -> object:
    """The Program (from `finish(graph, schedule_budget=None)`, which schedules, with
    at most that search budget where given, and plans a graph) of `rewritten`
    whose arena is at most `budget` bytes at the least recompute found, with its
    `remat` report (see the module docstring). PlanError naming the smallest arena
    found when none fits."""
    from tensorgraph.planner.remat import build_model, checkpoint_layers, rematerialize
    from tensorgraph.planner.remat_levels import induced_order, search_levels
    from tensorgraph.planner.remat_milp import (
        CERTIFY_MAX_VARIABLES,
        RematChoice,
        certify,
    )
    from tensorgraph.planner.remat_single import solve_single_copy
    from tensorgraph.planner.report import peak_holders

    keep = finish(rewritten)
    keep_arena = keep.plan.arena_size
    split = 0
    if keep_arena > budget:  # split the weight gradients first: no FLOPs, fewer bytes
        chunked, split = split_weight_gradients(rewritten, budget // SPLIT_SHARE)
        if split:
            rewritten, keep = chunked, finish(chunked)
            keep_arena = keep.plan.arena_size
    if keep_arena <= budget:
        report = RematReport(
            budget, "keep-all", 0, (), (), 0.0, keep_arena, keep_arena, 0.0, split=split
        )
        return evolve(keep, remat=report)
    started = time.perf_counter()
    model = build_model(rewritten, alignment, analyses)
    scale = model.peak(frozenset()) / max(1, keep.plan.lower_bound)
    target = int(budget * scale)

    def report(
        choice: RematChoice, arena: int, full_gap: float | None, of: RematModel
    ) -> RematReport:
        kept = tuple(u for u in of.candidates if u not in choice.emit)
        return RematReport(
            budget,
            choice.method,
            choice.flops,
            tuple(sorted(choice.emit)),
            kept,
            choice.gap,
            arena,
            keep_arena,
            time.perf_counter() - started,
            sum(len(e) for e in choice.emit.values()),
            full_gap,
            split,
        )

    # Bisect the model budget between a target whose point is too large once placed
    # (`too_big`: keeping everything is) and one the model cannot meet (`too_small`),
    # then between the best fitting target and `too_big`: a larger target never costs
    # more FLOPs in the model, so the fitting point of the largest target wins.
    placed: dict[tuple, object] = {}
    searched: set[tuple] = set()  # the keys planned with the full schedule budget

    def plan(emit: Mapping[int, tuple[int, ...]], order: tuple[int, ...] | None = None) -> object:
        """The program of `emit`'s rewrite (its steps those of `order`, None: the program
        order's), planned once per distinct set of copies, with the trial's schedule
        budget (TRIAL_SCHEDULE_BUDGET), and again with the full one where the arena
        does not fit."""
        key = (frozenset(emit.items()), order is not None)
        if key not in placed:
            graph = rematerialize(rewritten, emit, order)
            placed[key] = finish(graph, TRIAL_SCHEDULE_BUDGET)
            if _search_finished(placed[key], keep.options.schedule_budget):
                # The full budget gives this very order and plan: record the compile's.
                placed[key] = evolve(placed[key], options=keep.options)
                searched.add(key)
            elif placed[key].plan.arena_size > budget:
                placed[key] = finish(graph)
                searched.add(key)
        return placed[key]

    everything = frozenset(model.candidates)
    too_small, too_big = model.peak(everything, everything) - 1, model.peak(frozenset())
    best: tuple[RematChoice, object] | None = None
    best_trial = 0  # the model budget `best` was chosen at
    certificates: dict[int, Certificate] = {}  # trial -> the full program's there
    cut_short: set[int] = set()  # trials whose single-copy point the node limit cut short
    # The largest trial whose single-copy search found no point: no trial at or below it
    # searches again (a smaller budget only removes points). Near the model's least
    # memory the search ends at its node limit with nothing, at a minute or more a trial:
    # GPT-2's step at half its keep-everything arena, five trials between 1,920,815 and
    # 2,001,439 B, 65-152 s each, none with a point (the compile: 744 s -> 203 s).
    # Trade-off: a smaller budget's search could in principle reach a point within the
    # limit that a larger one's did not.
    barren: int | None = None
    fitting: int | None = None
    for attempt in range(MAX_ATTEMPTS):
        if attempt == 0:
            # Within the bracket: below the least memory the model knows (`too_small`)
            # no method but the single-copy program's search could answer, and there it
            # ran to its node limit proving infeasibility (over 8 minutes at GPT-2's
            # half budget).
            trial = max(too_small + 1, min(target, too_big - alignment))
        else:
            trial = ((too_small if fitting is None else fitting) + too_big) // 2
        if too_big - (too_small if fitting is None else fitting) <= alignment:
            break
        searches = barren is None or trial > barren
        found, certificates[trial], single = solve_all(
            model, trial, TRIAL_SINGLE_NODE_LIMIT, searches
        )
        if single is not None and single.gap != 0.0:
            cut_short.add(trial)
        if searches and single is None:
            barren = trial if barren is None else max(barren, trial)
        if not found:
            too_small = trial
            continue
        # The bisection follows the cheapest point (in the model a larger budget never
        # costs more); where it does not fit once placed, the other methods' points are
        # planned too, cheapest first, while they could still win: the model is an
        # estimate of the planner's liveness, so one of them may fit. They only improve
        # the answer, never move the bisection (measured: letting them move it, a
        # dearer point fitting made larger budgets the bracket, and Llama's answers
        # got dearer, 13.1M against 11.0M FLOPs at checkpoint-every-layer's arena).
        prog = plan(found[0].emit)
        if prog.plan.arena_size <= budget:
            fitting = trial
            answer = (found[0], prog)
        else:
            too_big = trial
            answer = next(
                (
                    (c, p)
                    for c in found[1:]
                    if (best is None or c.flops < best[0].flops)
                    and (p := plan(c.emit)).plan.arena_size <= budget
                ),
                None,
            )
        if answer is not None and (best is None or answer[0].flops < best[0].flops):
            best, best_trial = answer, trial
    # The full program at the answer's model budget, where it was too large to solve at
    # every trial (CERTIFY_MAX_VARIABLES, CERTIFY_WORK): its dual bound states the
    # answer's gap on the full model, and a cheaper point it finds is planned.
    certificate = None
    if best is not None and best_trial in cut_short:
        # The single-copy program at the answer's model budget with its full node
        # limit: it certifies the trial's point or finds a cheaper one, planned.
        single = solve_single_copy(model, best_trial)
        if single is not None and single.flops < best[0].flops:
            prog = plan(single.emit)
            if prog.plan.arena_size <= budget:
                best = (single, prog)
        if single is not None and best[0] is not single and best[0].method == "milp-single":
            best = (evolve(best[0], gap=proven(best[0].flops, single)), best[1])
    if best is not None:
        certificate = certificates[best_trial]
        if certificate.bound is None:
            certificate = certify(model, best_trial, None, CERTIFY_MAX_VARIABLES)
            point = certificate.point
            if point is not None and point.flops < best[0].flops:
                prog = plan(point.emit)
                if prog.plan.arena_size <= budget:
                    best = (point, prog)
    # The level search on the model of the least-memory point's own schedule
    # (planner/remat_levels.py): where the program order's model cannot see what the
    # scheduler makes of a step recomputed heavily, the model of the order the scheduler
    # chose for recompute-all can; its points are planned in that order.
    everything_emit = model.emissions(everything, everything)
    floor_order = induced_order(rewritten, plan(everything_emit).order)
    floor_model = build_model(rewritten, alignment, analyses, floor_order)
    level = search_levels(
        floor_model,
        budget,
        budget,
        floor_model.peak(frozenset()),
        lambda emit: plan(emit, floor_order),
        math.inf if best is None else best[0].flops,
        alignment,
    )
    # The fallbacks, planned only where they could win: when nothing fits yet, or with
    # fewer FLOPs than the point found. Each fitting point with its model and order.
    fits: list[tuple[RematChoice, object, RematModel, tuple | None]] = []
    if best is not None:
        fits.append((*best, model, None))
    if level is not None:
        fits.append((*level, floor_model, floor_order))
        best, certificate = level, None
    smallest, how, smallest_prog = keep_arena, "keep-all", keep
    for method, recompute, fresh in (
        ("checkpoint-layers", checkpoint_layers(model), frozenset()),
        ("recompute-all", everything, everything),
    ):
        emit = model.emissions(recompute, fresh)
        flops = model.recompute_cost(recompute, emit)
        if any(f[0].flops < flops for f in fits):
            continue
        prog = plan(emit)
        arena = prog.plan.arena_size
        if arena <= budget:
            fits.append((RematChoice(recompute, emit, flops, 0, method, None), prog, model, None))
        if arena < smallest:
            smallest, how, smallest_prog = arena, method, prog
    if fits:
        choice, prog, of, order = min(fits, key=lambda f: (f[0].flops, f[1].plan.arena_size))
        full_gap = None
        if best is not None and choice is best[0] and certificate is not None:
            full_gap = certificate.gap(choice.flops)
        # The answer scheduled with the full search budget, taken where it fits.
        if (frozenset(choice.emit.items()), order is not None) not in searched:
            final = finish(rematerialize(rewritten, choice.emit, order))
            if final.plan.arena_size <= budget:
                prog = final
        return evolve(prog, remat=report(choice, prog.plan.arena_size, full_gap, of))
    # Where the floor comes from: what that smallest plan holds at its peak (a weight's
    # gradient and its update's temporaries, say, which no recompute removes).
    holders = peak_holders(smallest_prog.plan, smallest_prog.graph)
    raise PlanError(
        f"graph {rewritten.name!r}: memory_budget {budget} B is below every arena "
        f"rematerialisation found; the smallest budget found feasible is {smallest} B "
        f"({how}; keeping every value needs {keep_arena} B); in that plan {holders}"
    )


def proven(flops: int, single: RematChoice) -> float | None:
    """The single-copy gap of a point of `flops` FLOPs against the dual bound of
    `single`, a solve of the single-copy program at the point's own model budget (the
    bound: its FLOPs times 1 - its gap); None without a bound."""
    if single.gap is None:
        return None
    bound = single.flops * (1.0 - single.gap)
    return 0.0 if flops <= bound else (flops - bound) / flops


def _search_finished(prog: object, own: int | None) -> bool:
    """Whether `prog` (planned with TRIAL_SCHEDULE_BUDGET) has the plan the compile's own
    schedule budget `own` (None: the default) gives: its search stopped before
    TRIAL_SCHEDULE_BUDGET's work, so with no improving move left (planner/schedule.py's
    local search stops only then, at its budget or at a `time_limit`, which the stats
    report as cut short), `own` is no larger, or the strategy is not the searching one
    ("best")."""
    if prog.options.schedule != "best" or (own is not None and own <= TRIAL_SCHEDULE_BUDGET):
        return True
    searched = prog.stats["schedule"]
    return searched["work"] < TRIAL_SCHEDULE_BUDGET and not searched["cut_short"]
