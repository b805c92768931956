"""Multi-entry programs: several graphs compiled together into one `MultiProgram`.

Generation runs a prefill over the prompt (at a few prompt-length buckets) and then a
decode step per token, all reading and updating one KV cache. Compiled separately they
would hold separate weight copies and separate caches. `compile_entries` (and
`tg.compile` given a dict of graphs) compiles every entry with the same options and
makes them share:

- the state region: one layout (`plan.state_layout`: name -> offset) computed from the
  states of every entry, so each state sits at the same offset in every entry's plan;
  a state declared by several entries must have one shape and dtype;
- the weights: bound params with equal contents (same dtype, shape and bytes, whatever
  the name: a weight folded the same way in two entries included) are one array,
  stored once in a saved file and converted once per device by the MLX backend;
- the activation arena: entries run one at a time, so one arena of the largest
  entry's size serves them all (`arena_size`). Each entry is planned exactly as it
  would be compiled alone, so the shared arena is never larger than the largest
  entry's own.

An entry may be symbolic (a graph over `tg.Dim`s: generation's prefill at the prompt's
real length). Its states must be static (the region persists across calls), and take the
shared layout's offsets like any entry's; its activations have a parametric plan
(planner/parametric.py), so a call runs the entry's concrete program at the call's
dims: the arena backend allocates exactly `plan.at(...)`'s arena, and every length's
concrete program shares the entry's weights (`shared_of`). The sizes this module reports
(`arena_size`, `memory`) take a symbolic entry at each dim's max, the most it holds.

- the trained weights: a param of one entry named like a state of another (an
  inference graph beside its training step, `tg.compile({"infer": g, "train": step})`)
  becomes a read-only state of its entry (`weights_as_states`), so the entry reads the
  state region's bytes where the step updates them: the weights live once, at one offset
  for all entries, and a model trained through one entry serves the other with no copy.
  The param must have the state's shape and dtype, and a value it binds must equal the
  state's initial value (else a GraphError naming both); it can no longer be fed as a
  param at run time.

Backends learn what an entry shares from `planner.sharing.shared_of(entry)` (a `Shared`): the
MLX backend converts each shared weight once per device for all entries, and lets an
entry's segments use the shared arena (memory the program holds anyway) instead of
the entry's own, smaller one.

Invariants: every entry's plan carries the same `state_layout` and `state_size`, and
the layout's states are disjoint and inside the region; a State from `new_state`
holds every state of every entry.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping

import numpy as np
from attrs import frozen

from tensorgraph.errors import GraphError, PlanError, RunError
from tensorgraph.ir.graph import Graph
from tensorgraph.planner.buffers import align_up
from tensorgraph.planner.footprint import Footprint, constant_kinds, io_size
from tensorgraph.planner.sharing import Shared, share


@frozen(eq=False)
class MultiProgram:
    """Compiled entries (name -> Program) sharing weights, state region and arena (see
    the module docstring). Build with `compile_entries` or `MultiProgram.assemble`."""

    entries: Mapping[str, object]

    @classmethod
    def assemble(cls, entries: Mapping[str, object]) -> MultiProgram:
        """The MultiProgram of compiled `entries` (name -> Program), checked: at least
        one entry, one state layout for all, the layout's states disjoint. Equal
        weights are made one array."""
        if not entries:
            raise GraphError("a multi-entry program needs at least one entry")
        plans = [p.plan for p in entries.values()]
        layout, size = plans[0].state_layout, plans[0].state_size
        for name, program in entries.items():
            if program.plan.state_layout != layout or program.plan.state_size != size:
                raise PlanError(f"entry {name!r} has another state layout than the others")
        _check_layout(entries, layout, size)
        _share_weights(entries)
        shared = Shared(max(p.plan.arena_size for p in entries.values()))
        for program in entries.values():
            share(program, shared)
        return cls(dict(entries))

    # ------------------------------------------------------------ sizes

    @property
    def arena_size(self) -> int:
        """Bytes of the shared activation arena: the largest entry's arena."""
        return max(p.plan.arena_size for p in self.entries.values())

    @property
    def state_size(self) -> int:
        return next(iter(self.entries.values())).plan.state_size

    @property
    def state_layout(self) -> dict[str, int]:
        return dict(next(iter(self.entries.values())).plan.state_layout)

    @property
    def constant_size(self) -> int:
        """Bytes of the shared constant segment: every distinct weight and constant of
        the entries once, each aligned as the entries' plans align them."""
        return sum(aligned for _, _, aligned in self._distinct_constants().values())

    def _distinct_constants(self) -> dict[tuple, tuple]:
        """Every distinct constant-segment value of the entries once: key -> (graph,
        node, aligned bytes). A bound weight is one value whatever entry reads it."""
        seen: dict[tuple, tuple] = {}
        for program in self.entries.values():
            graph, plan = program.graph, program.plan
            for root in plan.liveness.constants:
                node = graph.node(root)
                value = graph.param_values.get(node.name) if node.op == "param" else None
                key = (
                    ("weight", id(value))
                    if value is not None
                    else (node.op, node.name, node.attr("value"), node.shape, node.dtype.name)
                )
                seen[key] = (graph, node, align_up(node.nbytes, plan.alignment))
        return seen

    def memory(self) -> Footprint:
        """Every byte the program holds (planner/footprint.py): the shared constant
        segment by kind, the state region, the shared arena, and the largest entry's
        inputs and outputs (entries run one at a time)."""
        constants = [(g, n) for g, n, _ in self._distinct_constants().values()]
        io = max(io_size(_at_max(p).graph) for p in self.entries.values())
        return Footprint(
            constant_kinds(constants), self.constant_size, self.state_size, self.arena_size, io
        )

    @property
    def total_size(self) -> int:
        """Bytes the program needs in all: arena + constants + state region."""
        return self.arena_size + self.constant_size + self.state_size

    # ------------------------------------------------------------ running

    def entry(self, name: str) -> object:
        """The Program of entry `name` (RunError naming the entries otherwise)."""
        if name not in self.entries:
            raise RunError(f"no entry {name!r}; entries: {', '.join(self.entries)}")
        return self.entries[name]

    def run(
        self,
        entry: str,
        inputs: Mapping[str, object],
        params: Mapping[str, object] | None = None,
        backend: str = "mlx",
        *,
        state: object | None = None,
        **options: object,
    ) -> list:
        """Run entry `entry` as `Program.run` does, on `state` (None: this program's
        own State for `backend`, shared by all entries)."""
        program = self.entry(entry)
        if state is None and program.graph.states:
            state = self.state(backend)
        return program.run(inputs, params, backend, state=state, **options)

    def new_state(self, backend: str = "mlx") -> object:
        """A fresh `State` holding every state of every entry, for `backend`: each at
        its initial value (the entries' `state_values`) or zeros."""
        from tensorgraph.calls import new_state
        from tensorgraph.runtime.state import state_initials, state_specs

        graphs = [p.graph for p in self.entries.values()]
        initial = state_initials(graphs)
        return new_state(state_specs(graphs), self.state_layout, self.state_size, backend, initial)

    def state(self, backend: str = "mlx") -> object:
        """This program's own State for `backend` (initial values or zeros at first, kept
        across calls)."""
        from tensorgraph.runtime.state import own_state

        return own_state(self, backend)

    def reset_state(self) -> None:
        """Every state of this program's own States back to its initial value or zeros."""
        from tensorgraph.runtime.state import reset_own_states

        reset_own_states(self)

    # ------------------------------------------------------------ reading and saving

    def report(self) -> str:
        """Each entry's arena, lower bound and steps, then the shared memory."""
        from tensorgraph.planner.report import format_multi_report

        return format_multi_report(self)

    def save(self, path: str | os.PathLike, state: object | None = None) -> None:
        """Write every entry, the shared weights once (see tensorgraph.program_io); with
        `state` (a State of this program), the loaded program's states start from its
        current values. A symbolic entry is saved as a symbolic program is (its dims'
        ranges and its plan's orientations): the loaded program's `plan.at(...)` is the
        saved one's at every length, its states at the same shared offsets."""
        from tensorgraph.program_io import save

        save(self, path, state)

    def __repr__(self) -> str:
        return (
            f"<MultiProgram {', '.join(self.entries)}: arena {self.arena_size} B, "
            f"constants {self.constant_size} B, state {self.state_size} B>"
        )


def _at_max(program: object) -> object:
    """`program`, or a symbolic program's concrete program at each dim's max."""
    if not program.graph.dims:
        return program
    from tensorgraph.symbolic_program import concrete_program

    return concrete_program(program, program.plan.representative)


def _check_layout(entries: Mapping[str, object], layout: Mapping[str, int], size: int) -> None:
    """PlanError unless the states of all entries lie disjoint inside the region (each
    entry's `verify_plan` checked its own states, alignment included, but not against
    the states only other entries declare)."""
    from tensorgraph.planner.check import verify_state_layout

    sizes = {n.name: n.nbytes for p in entries.values() for n in p.graph.states}
    verify_state_layout(sizes, layout, size)


def _share_weights(entries: Mapping[str, object]) -> None:
    """Make bound params with equal contents one array across the entries' graphs (the
    values are equal, so no result changes; only memory and files shrink)."""
    canonical: dict[tuple, np.ndarray] = {}
    for program in entries.values():
        values = program.graph.param_values
        for name, value in values.items():
            key = (value.dtype.str, value.shape, hashlib.sha1(value.tobytes()).digest())
            values[name] = canonical.setdefault(key, value)


def compile_entries(graphs: Mapping[str, Graph], **options: object) -> MultiProgram:
    """Compile every graph of `graphs` (entry name -> Graph) with `options` (those of
    `tg.compile`) into one MultiProgram (see the module docstring). GraphError when
    `graphs` is empty, an entry is not a Graph, or a state is declared with two shapes
    or dtypes; PlanError for a state whose shape holds a dim."""
    from tensorgraph.compiler import compile as compile_one
    from tensorgraph.planner.plan import state_layout

    if not isinstance(graphs, Mapping) or not graphs:
        raise GraphError("compile needs a Graph or a non-empty dict of entry name -> Graph")
    for name, graph in graphs.items():
        if not isinstance(name, str) or not isinstance(graph, Graph):
            raise GraphError(f"entry {name!r}: expected a name and a Graph, got {graph!r}")
    for name, graph in graphs.items():
        for node in graph.states:
            if node.symbolic:  # the region is laid out once, before any entry is planned
                raise PlanError(
                    f"entry {name!r}: state {node.name!r} has shape {node.shape}: a state's "
                    "bytes persist across calls, so its shape must be static"
                )
    graphs = weights_as_states(graphs)
    alignment = options.get("alignment", 64)
    valid = isinstance(alignment, int) and not isinstance(alignment, bool) and alignment >= 1
    # a bad alignment is compile's PlanError, raised by the first entry's compile below
    states = state_layout(list(graphs.values()), alignment if valid else 1)
    entries = {name: compile_one(g, states=states, **options) for name, g in graphs.items()}
    return MultiProgram.assemble(entries)


def weights_as_states(graphs: Mapping[str, Graph]) -> dict[str, Graph]:
    """`graphs` with every param named like a state of another entry made that state
    (same node id, name, shape and dtype; read, never updated, by its entry), carrying
    the state's initial value; the other graphs as they are. GraphError naming the entry
    and the weight when the param's shape or dtype differs from the state's, or the
    value it binds differs from the state's initial value (zeros when it has none), or
    two entries start one state from different values."""
    from tensorgraph.ir.node import Node
    from tensorgraph.runtime.state import state_initials

    states = {n.name: (entry, n) for entry, g in graphs.items() for n in g.states}
    try:
        initial = state_initials(graphs.values())
    except RunError as err:
        raise GraphError(str(err)) from err
    result = dict(graphs)
    for entry, graph in graphs.items():
        shared = [n for n in graph.params if n.name in states]
        if not shared:
            continue
        for param in shared:
            owner, state = states[param.name]
            if (param.shape, param.dtype) != (state.shape, state.dtype):
                raise GraphError(
                    f"entry {entry!r}: param {param.name!r} ({param.shape} {param.dtype}) "
                    f"cannot read state {param.name!r} of entry {owner!r} ({state.shape} "
                    f"{state.dtype})"
                )
            bound = graph.param_values.get(param.name)
            start = initial.get(param.name, np.zeros(state.shape, state.dtype.to_numpy()))
            if bound is not None and not np.array_equal(bound, start, equal_nan=True):
                raise GraphError(
                    f"entry {entry!r}: param {param.name!r} is bound to other values than "
                    f"the initial value of state {param.name!r} of entry {owner!r}"
                )
        names = {n.name for n in shared}
        nodes = [
            Node(n.id, "state", (), n.attrs, n.shape, n.dtype) if n.name in names else n
            for n in graph.nodes
        ]
        result[entry] = Graph.from_nodes(
            graph.name,
            nodes,
            graph.outputs,
            {k: v for k, v in graph.param_values.items() if k not in names},
            graph.state_positions,
            {**graph.state_values, **{k: initial[k] for k in names if k in initial}},
        )
    return result
