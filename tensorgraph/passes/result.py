"""What every pass returns: the rewritten graph and its counters."""

from __future__ import annotations

from attrs import field, frozen

from tensorgraph.ir.graph import Graph


@frozen
class PassResult:
    """A pass's output graph (the input object itself when nothing changed) and counters."""

    graph: Graph
    stats: dict[str, int] = field(factory=dict)
