"""Alias analysis: which values share bytes with another value, for one chosen order.

The graph carries no memory decision. For a graph and an order, `analyze_aliasing`
computes an `Aliasing`: for every node that owns no bytes of its own, an `Alias` naming
the node whose bytes hold its value and the byte offset inside them. Three analyses
exist (`ANALYSES`, run in that order); the compiler runs the ones the user's pass list
names, always after scheduling, so no pass order and no earlier compile can make an
unsafe decision:

- `view_alias`: a reshape, a same-dtype cast and a narrow along an axis whose preceding
  axes have extent 1 (whatever `ops.view_offset` accepts) read their input's bytes at
  a byte offset and write none. Safe in any order: a view never writes, and its reads
  extend its root's lifetime. A view smaller than its source (a narrow) is kept only
  when the aliasing with it peaks no higher than with that narrow copied: a small slice
  read late, or returned, would otherwise pin its whole source.
- `copy_elim`: a concat's operands are written in place into its bytes
  (`planner.copy_elim`; alias kind "concat", pointing forward to the concat). Reinplace
  then runs on the merged lifetimes; the placements are kept only when the result peaks
  no higher than reinplacing without them (a placed value lives as long as its concat,
  which can cost an in-place write).
- `reinplace`: an elementwise op, or an update (`UPDATE_OPS`: slice_update,
  index_update) over its target (operand 0), writes
  its output over operand k when, for this order, by the one liveness analysis:
  1. the operand's storage root is read by nothing after this step, through any view
     or earlier in-place alias (`last_read[root] == step`); a graph output's root lives
     to the end, so it never qualifies;
  2. the operand sits at offset 0 of its root, and operand, root and output have the
     same byte size and dtype (no broadcast growth, no dtype change);
  3. the class's root is not an input, param or constant (the caller's bytes, or the
     constant segment loaded once), nor a state the graph does not update; a state it
     updates may be written (a KV cache's slice_update writes straight into the cache:
     the call leaves a new value in those bytes anyway, and rule 1 guarantees nothing
     reads the old one later);
  4. every other operand reading the same root reads exactly the written bytes with the
     same element mapping (offset 0, the output's shape up to leading 1s and its dtype,
     see `same_mapping`),
     so element i is read before element i is written, whatever order the kernel walks
     the elements in. Anything else (`r + narrow(r, 0, 0, 1)` over `r`, the update of
     a slice_update taken from its own target) is refused: it would depend on the
     kernel's iteration order.

Why one liveness analysis (of the views and placements) suffices for chains: when n at step t reuses
operand o whose root is p, rule 1 says p's readers all ran by t, so the merged class's
last read is n's own. A later op m reusing n asks `last_read[n] == step(m)` of the same
analysis and sees exactly the merged lifetime, by induction along the chain; `root_of`
tracks which root each class ends in, for rules 3 and 4. Each analysis is
O(nodes + edges); the peak comparisons run it at most six times.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from attrs import field, frozen

from tensorgraph.errors import GraphError
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node
from tensorgraph.ir.ops import OPS, view_offset
from tensorgraph.ir.updates import UPDATE_OPS
from tensorgraph.planner.copy_elim import place_concats

ANALYSES = ("view_alias", "copy_elim", "reinplace")
KINDS = ("view", "inplace", "concat")


@frozen
class Alias:
    """A node's value lives in `source`'s bytes at byte `offset` (`kind` in KINDS).

    "view" and "inplace" point back to an operand; "concat" points forward, from a
    storage root to a later concat that holds the root's bytes."""

    source: int
    offset: int
    kind: str


@frozen
class Aliasing:
    """The alias decisions for one graph and order: node id -> `Alias` for every node
    that owns no bytes (absent ids own their buffer). `analyses` ran to make it."""

    aliases: Mapping[int, Alias] = field(factory=dict)
    analyses: tuple[str, ...] = ()

    def of(self, node_id: int) -> Alias | None:
        return self.aliases.get(node_id)

    def count(self, kind: str) -> int:
        return sum(1 for a in self.aliases.values() if a.kind == kind)

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready form (node ids as strings), read back by `from_dict`."""
        return {
            "analyses": list(self.analyses),
            "aliases": {str(k): [a.source, a.offset, a.kind] for k, a in self.aliases.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> Aliasing:
        try:
            aliases = {
                int(k): Alias(int(v[0]), int(v[1]), str(v[2])) for k, v in data["aliases"].items()
            }
            analyses = tuple(str(a) for a in data["analyses"])
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
            raise GraphError(f"malformed aliasing record: {err}") from err
        bad = [a.kind for a in aliases.values() if a.kind not in KINDS]
        if bad:
            raise GraphError(f"aliasing record has unknown alias kind(s) {sorted(set(bad))}")
        return cls(aliases, analyses)


def check_analyses(names: Sequence[str]) -> tuple[str, ...]:
    """The analyses named in `names`, in canonical order (GraphError on an unknown one)."""
    unknown = [n for n in names if n not in ANALYSES]
    if unknown:
        raise GraphError(f"unknown alias analysis {unknown}; known: {', '.join(ANALYSES)}")
    return tuple(a for a in ANALYSES if a in names)


def view_of(graph: Graph, node: Node) -> Alias | None:
    """The view alias of `node` over its input, or None when it must copy."""
    if not node.inputs:
        return None
    source = graph.node(node.inputs[0])
    extra = view_offset(node.op, node.attr_dict, source.shape, node.dtype, source.dtype)
    return None if extra is None else Alias(source.id, extra, "view")


def inplace_slots(node: Node) -> range:
    """Operand positions `node` may write over: any operand of an elementwise op, the
    target of a slice_update; none for other ops."""
    if node.op in UPDATE_OPS:
        return range(1)
    if OPS[node.op].elementwise:
        return range(len(node.inputs))
    return range(0)


def same_mapping(node: Node, operand: Node, offset: int) -> bool:
    """True when reading `operand` at byte `offset` of the bytes `node` writes visits
    element i exactly where `node` writes element i (rule 4 of the module docstring).
    An elementwise op reads element i of such an operand to write element i; so does a
    slice_update of its target (and of an update as large as the target)."""
    return (
        (OPS[node.op].elementwise or node.op in UPDATE_OPS)
        and offset == 0
        and _without_leading_ones(operand.shape) == _without_leading_ones(node.shape)
        and operand.dtype == node.dtype
    )


def _without_leading_ones(shape: tuple[int, ...]) -> tuple[int, ...]:
    """`shape` less its leading 1s: broadcasting (1, 1, n) against (1, n) is the identity
    on elements, so both read element i where the output writes element i."""
    start = 0
    while start < len(shape) and shape[start] == 1:
        start += 1
    return shape[start:]


def analyze_aliasing(
    graph: Graph,
    order: Sequence[int] | None = None,
    analyses: Sequence[str] = ANALYSES,
    *,
    alignment: int = 1,
) -> Aliasing:
    """The aliasing of `graph` run in `order` (its node order when None) with the
    analyses named in `analyses` (see the module docstring). Where two choices are
    compared by their peak, buffers are rounded up to `alignment` bytes, as the plan
    will round them."""
    names = check_analyses(analyses)
    order = tuple(n.id for n in graph.nodes) if order is None else tuple(order)
    views: dict[int, Alias] = {}
    if "view_alias" in names:
        for node_id in order:
            view = view_of(graph, graph.node(node_id))
            if view is not None:
                views[node_id] = view
    peaks = _Peaks(graph, order, alignment)
    aliases = _decide(graph, order, names, views, peaks)
    # A view smaller than its source keeps the whole source alive for as long as the
    # view is read: copying a small slice that is read late (or is an output) can let a
    # large source die early. Keep such views only when they peak no higher.
    shrinking = {i for i, a in views.items() if graph.node(i).nbytes < graph.node(a.source).nbytes}
    if shrinking:
        whole = {i: a for i, a in views.items() if i not in shrinking}
        copied = _decide(graph, order, names, whole, peaks)
        if peaks(copied) < peaks(aliases):
            aliases = copied
    return Aliasing(aliases, names)


class _Peaks:
    """The peak live bytes (buffers rounded up to `alignment`) of `graph` in `order` under
    an alias dict, each distinct dict analysed once: `_decide` compares the aliasing it
    returns with another, and `analyze_aliasing` compares that one again."""

    def __init__(self, graph: Graph, order: tuple[int, ...], alignment: int) -> None:
        self.graph, self.order, self.alignment = graph, order, alignment
        self.seen: dict[frozenset, int] = {}

    def __call__(self, aliases: dict[int, Alias]) -> int:
        key = frozenset(aliases.items())
        if key not in self.seen:
            self.seen[key] = _peak(self.graph, self.order, aliases, self.alignment)
        return self.seen[key]


def _decide(
    graph: Graph,
    order: tuple[int, ...],
    names: tuple[str, ...],
    views: dict[int, Alias],
    peaks: _Peaks,
) -> dict[int, Alias]:
    """The views `views`, then concat placements and in-place writes as `names` ask
    (`peaks` compares two choices, at the alignment the plan will have)."""
    from tensorgraph.planner.liveness import analyze

    aliases = dict(views)
    views_live = placed = None
    if "copy_elim" in names:
        views_live = analyze(graph, order, Aliasing(views))
        placed = place_concats(graph, order, views_live, peaks.alignment)
        aliases.update(placed)
    if "reinplace" in names:
        if placed:
            _reinplace(graph, order, analyze(graph, order, Aliasing(dict(aliases))), aliases)
            # Placements can cost in-place writes (a placed value lives as long as its
            # concat): keep them only when the whole aliasing peaks no higher.
            plain = dict(views)
            _reinplace(graph, order, views_live, plain)
            if peaks(plain) < peaks(aliases):
                aliases = plain
        else:
            pre = views_live or analyze(graph, order, Aliasing(views))
            _reinplace(graph, order, pre, aliases)
    return aliases


def _peak(graph: Graph, order: Sequence[int], aliases: dict[int, Alias], alignment: int) -> int:
    from tensorgraph.planner.liveness import analyze

    return max(analyze(graph, order, Aliasing(aliases)).live_bytes(alignment), default=0)


def writable_state(graph: Graph, node: Node) -> bool:
    """True for a state that `graph` updates: the one boundary value whose bytes a node
    may write in place (rule 3: the call leaves a new value there anyway)."""
    return node.op == "state" and node.name in graph.state_positions


def _reinplace(graph: Graph, order: Sequence[int], pre: object, aliases: dict[int, Alias]) -> None:
    """In-place decisions by rules 1-4, from `pre`, the liveness with views and concat
    placements, added to `aliases`. A writer placed into a concat joins its operand's
    class, so the placement moves to that class's root (which `pre` shows unplaced:
    its last read is this step, so no later concat reads it)."""
    root_of: dict[int, int] = {}  # a root of `pre` -> the root its class ends in
    updates = {value: name for name, value in graph.state_updates.items()}

    def own_state(node: Node, k: int) -> bool:
        """Whether operand k's class is the state `node`'s value updates."""
        first = pre.storage[node.inputs[k]].root
        root = graph.node(root_of.get(first, first))
        return root.op == "state" and root.name == updates.get(node.id)

    for step, node_id in enumerate(order):
        node = graph.node(node_id)
        if not node.nbytes:
            continue
        slots = inplace_slots(node)
        if node_id in updates:  # a state's new value: over that state's old bytes first
            slots = sorted(slots, key=lambda k: not own_state(node, k))
        for k in slots:
            operand = graph.node(node.inputs[k])
            where = pre.storage[operand.id]
            if pre.last_read[where.root] != step or where.offset != 0:
                continue
            first = graph.node(where.root)
            if not operand.nbytes == first.nbytes == node.nbytes or operand.dtype != node.dtype:
                continue
            final = root_of.get(where.root, where.root)
            class_root = graph.node(final)
            if OPS[class_root.op].boundary and not writable_state(graph, class_root):
                continue
            if _hazard(graph, node, k, final, pre, root_of):
                continue
            placement = aliases.get(node.id)
            if placement is not None:  # node is a placed root: its class root takes over
                if final in aliases or OPS[class_root.op].boundary:
                    continue
                aliases[final] = placement
            aliases[node.id] = Alias(operand.id, 0, "inplace")
            root_of[node.id] = final
            break


def _hazard(
    graph: Graph, node: Node, slot: int, root: int, pre: object, root_of: dict[int, int]
) -> bool:
    """True when another operand of `node` reads class `root` with another mapping."""
    for j, i in enumerate(node.inputs):
        if j == slot:
            continue
        where = pre.storage[i]
        if root_of.get(where.root, where.root) != root:
            continue
        if not same_mapping(node, graph.node(i), where.offset):
            return True
    return False
