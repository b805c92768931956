"""What one MLX run cost in memory and time, next to what its plan says it needs.

A run records a `RunStats` only when asked (`prog.run(..., backend="mlx", stats=True)`,
then `last_run(prog)`), because measuring resets MLX's process-wide peak-memory counter
(`mx.reset_peak_memory`), which a caller may be using for its own measurements.

Accounting. MLX reports the process's peak bytes, which include arrays that have nothing
to do with the run. So the run's `peak` is its `resident` bytes (this program's weights
and constants already on the device when the run began, plus the caller's mx.array
feeds) plus MLX's peak above the active bytes at the start of the run (activations,
outputs, and on a first run the weights converted during it). The plan's `bound` for
it is arena + constant segment + inputs and outputs: the arena holds inputs and outputs
too, but MLX keeps the caller's feeds and the returned outputs in arrays of their own.
"""

from __future__ import annotations

from attrs import frozen


def io_bytes(graph: object) -> int:
    """The bytes of `graph`'s inputs plus its outputs: what the caller's feeds and the
    returned arrays hold beside the arena (the `io_size` of a run)."""
    inputs = sum(n.nbytes for n in graph.nodes if n.op == "input")
    return inputs + sum(graph.node(o).nbytes for o in graph.outputs)


def plan_bound(program: object) -> int:
    """What `program`'s plan accounts for on MLX: arena + constant segment + io_bytes."""
    plan = program.plan
    return plan.arena_size + plan.constant_size + io_bytes(program.graph)


@frozen
class RunStats:
    """One MLX run: `mode` (as asked), `device`, `evaluations` (MLX evaluations
    launched: one per step in eager mode, per segment in auto mode, one when compiled),
    wall-clock `seconds` (conversions included). Bytes: `peak` and `resident` as in the
    module docstring; the plan's `arena_size` and `constant_size`; `io_size`, the
    graph's inputs plus outputs."""

    mode: str
    device: str
    evaluations: int
    seconds: float
    peak: int
    resident: int
    arena_size: int
    constant_size: int
    io_size: int

    @property
    def bound(self) -> int:
        """What the plan accounts for: arena + constant segment + inputs and outputs."""
        return self.arena_size + self.constant_size + self.io_size

    @property
    def ratio(self) -> float:
        """peak / bound: at most 1 when MLX's memory is explained by the plan."""
        return self.peak / self.bound if self.bound else 1.0

    @property
    def activations(self) -> int:
        """The bytes the run added at its peak over what was resident: `peak - resident`,
        to compare with the arena alone."""
        return self.peak - self.resident

    def __str__(self) -> str:
        mib = 2**20
        return (
            f"MLX {self.mode} on {self.device}: {self.seconds * 1e3:.2f} ms, "
            f"{self.evaluations} evaluation(s); peak {self.peak / mib:.2f} MiB = "
            f"{self.ratio:.3f}x the plan's {self.bound / mib:.2f} MiB (arena "
            f"{self.arena_size / mib:.2f} + constants {self.constant_size / mib:.2f} + "
            f"inputs/outputs {self.io_size / mib:.2f}); above resident "
            f"{self.activations / mib:.2f} MiB"
        )
