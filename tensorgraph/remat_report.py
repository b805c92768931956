"""What rematerialisation chose, as `Program.remat` reports it and `prog.save` stores it:
`RematReport`, and the methods a report may name. Invariant: `from_dict(to_dict())`
gives the report back, and `from_dict` takes nothing else (a PlanError names the
field)."""

from __future__ import annotations

from attrs import frozen

from tensorgraph.errors import PlanError


@frozen
class RematReport:
    """What rematerialisation chose: the `budget` (bytes), the `method` ("keep-all",
    "milp", "milp-single", "greedy", "checkpoint-layers", "recompute-all"), `recompute_flops` (the
    FLOPs of the copies, planner/flops.py's estimate), the forward node ids
    `recomputed` and `kept` (the candidates, ids of the rewritten graph before the
    copies were added), the solver's proven `gap` (0.0: certified optimal for the
    model, which for "milp-single" is the single-copy restriction only; None: no
    bound, as for the heuristic and the fallbacks), the placed
    `arena` and the `keep_all_arena` (bytes), `solve_seconds` (informative only) and
    `copies`, the copies emitted (a value recomputed twice counts twice), and
    `full_gap`: the point's proven gap against the full multi-copy program
    (planner/remat_milp.py) at the model budget the point was chosen at, (FLOPs -
    HiGHS's dual bound) / FLOPs: 0.0 when no point of the full program is cheaper there
    (certified optimal for the full model, whichever method found the point); None where
    the full program was not solved (above CERTIFY_MAX_VARIABLES) or the answer is a
    fallback. `split`: the convolution weight gradients split into chunks before any
    recompute (ir/conv_grad_chunks.py; 0: none)."""

    budget: int
    method: str
    recompute_flops: int
    recomputed: tuple[int, ...]
    kept: tuple[int, ...]
    gap: float | None
    arena: int
    keep_all_arena: int
    solve_seconds: float
    copies: int = 0
    full_gap: float | None = None
    split: int = 0

    def to_dict(self) -> dict[str, object]:
        """The report as JSON values (what `prog.save` stores; `from_dict` inverts it)."""
        return {
            "budget": self.budget,
            "method": self.method,
            "recompute_flops": self.recompute_flops,
            "recomputed": list(self.recomputed),
            "kept": list(self.kept),
            "gap": self.gap,
            "arena": self.arena,
            "keep_all_arena": self.keep_all_arena,
            "solve_seconds": self.solve_seconds,
            "copies": self.copies,
            "full_gap": self.full_gap,
            "split": self.split,
        }

    @classmethod
    def from_dict(cls, raw: object) -> RematReport:
        """The report `to_dict` gave; PlanError naming the field of a wrong type or value
        (the loader reports it as a LoadError naming the file). `copies`, `full_gap` and
        `split` may be absent (reports saved before they were stored): then their
        defaults, 0, None and 0."""
        required = set(_FIELDS) - {"copies", "full_gap", "split"}
        if not isinstance(raw, dict) or not required <= set(raw) <= set(_FIELDS):
            raise PlanError(f"a remat report needs exactly the fields {_FIELDS}, got {raw!r:.80}")
        raw = {"copies": 0, "full_gap": None, "split": 0, **raw}
        for name, kind in _FIELDS.items():
            value = raw[name]
            ok = {
                "int": isinstance(value, int) and not isinstance(value, bool) and value >= 0,
                "str": isinstance(value, str) and value in METHODS,
                "ids": isinstance(value, list)
                and all(isinstance(i, int) and not isinstance(i, bool) for i in value),
                "gap": value is None
                or (isinstance(value, int | float) and not isinstance(value, bool) and value >= 0),
                "seconds": isinstance(value, int | float) and not isinstance(value, bool),
            }[kind]
            if not ok:
                raise PlanError(f"remat report field {name!r} is not a valid {kind}: {value!r:.60}")
        return cls(**{**raw, "recomputed": tuple(raw["recomputed"]), "kept": tuple(raw["kept"])})


METHODS = ("keep-all", "milp", "milp-single", "greedy", "checkpoint-layers", "recompute-all")
_FIELDS = {
    "budget": "int",
    "method": "str",
    "recompute_flops": "int",
    "recomputed": "ids",
    "kept": "ids",
    "gap": "gap",
    "arena": "int",
    "keep_all_arena": "int",
    "solve_seconds": "seconds",
    "copies": "int",
    "full_gap": "gap",
    "split": "int",
}
