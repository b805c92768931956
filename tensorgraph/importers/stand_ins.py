"""Export-friendly stand-ins for the transformers modules that torch.export cannot trace,
swapped in for the export only (`stand_ins(module)`), each computing the same values.

Switch Transformers (its default and only experts implementation) fails twice inside
torch.export, before the importer sees a graph:

1. `SwitchTransformersExperts.forward` loops in Python over the experts that received a
   token (`for expert_idx in expert_hit`, from `nonzero()`), and gathers each one's
   tokens with `torch.where`: the number of iterations and every shape in them depend on
   the data, which no static graph can hold (strict export: "Could not extract
   specialized integer from data-dependent expression"; transformers marks the model
   `_can_compile_fullgraph = False`). The stand-in stacks the experts' `wi` and `wo`
   weights into (E, d_ff, d) and (E, d, d_ff) and runs transformers' own
   `grouped_mm_experts_forward` (what Mixtral's default experts run), which sorts the
   tokens by expert and multiplies them in one grouped matmul: the importer maps it onto
   `gather_mm` (`importers.aten_moe`). Each token's expert is the one its one-hot
   dispatch row selects, weighted by its router probability; a token past its expert's
   capacity (an all-zero row) gets weight 0, so its output is 0 as in the loop.
2. `SwitchTransformersTop1Router.forward` assigns `self.classifier =
   self.classifier.to(router_dtype)`; non-strict export traces with fake parameters,
   which `Module.to` must swap (`torch.utils.swap_tensors`), and a parameter the export
   holds cannot be swapped ("Couldn't swap Linear.weight"). The stand-in classifier is the
   same Linear whose `.to(dtype)` is itself when it already has that dtype (what
   `Module.to` would return anyway); any other conversion goes through `Module.to`, so a
   half-precision Switch model (a bfloat16 classifier cast to the float32 router_dtype)
   still fails there.

Swapping back restores the original modules, so the caller's model is left as it was.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

try:
    import torch
except ImportError as err:  # pragma: no cover - exercised only without torch
    raise ImportError(
        "tensorgraph.importers.stand_ins needs torch: pip install 'tensorgraph[torch]'"
    ) from err

__all__ = ["STAND_INS", "stand_ins"]


class _SwitchExperts(torch.nn.Module):
    """SwitchTransformersExperts (E DenseActDense experts: wi, activation, wo, no bias) as
    one grouped matmul per projection over stacked weights: transformers'
    `grouped_mm_experts_forward` reads `up_proj`, `down_proj`, `act_fn` and the flags."""

    def __init__(self, experts: torch.nn.ModuleDict) -> None:
        super().__init__()
        dense = [experts[f"expert_{e}"] for e in range(experts.num_experts)]
        self.num_experts = experts.num_experts
        with torch.no_grad():
            self.up_proj = torch.nn.Parameter(torch.stack([d.wi.weight for d in dense]))
            self.down_proj = torch.nn.Parameter(torch.stack([d.wo.weight for d in dense]))
        self.act_fn = dense[0].act
        self.has_gate = self.has_bias = self.has_post_expert_norm = False
        self.is_transposed = self._is_expert_parallel = False

    def forward(
        self, hidden_states: torch.Tensor, selected_experts: torch.Tensor, weights: torch.Tensor
    ) -> torch.Tensor:
        """hidden_states (T, d); selected_experts (T, 1, E), one-hot or all zeros (a token
        dropped by capacity); weights (T, 1), each token's router probability."""
        from transformers.integrations.moe import grouped_mm_experts_forward

        expert = selected_experts.argmax(dim=-1)  # (T, 1): an all-zero row gives 0
        kept = selected_experts.sum(dim=-1).to(weights.dtype)  # 1, or 0 when dropped
        return grouped_mm_experts_forward(self, hidden_states, expert, weights * kept)


class _FixedDtypeLinear(torch.nn.Linear):
    """A Linear whose `.to(dtype)` is itself where its weight already has that dtype."""

    def to(self, *args: object, **kwargs: object) -> torch.nn.Module:
        dtype = kwargs.get("dtype", args[0] if args else None)
        only_dtype = isinstance(dtype, torch.dtype) and len(args) + len(kwargs) == 1
        return self if only_dtype and self.weight.dtype == dtype else super().to(*args, **kwargs)


def _fixed_dtype(linear: torch.nn.Linear) -> _FixedDtypeLinear:
    """A _FixedDtypeLinear sharing `linear`'s weight and bias."""
    fixed = _FixedDtypeLinear(linear.in_features, linear.out_features, bias=linear.bias is not None)
    fixed.weight, fixed.bias = linear.weight, linear.bias
    return fixed


# transformers class name -> {child name: its stand-in} for a module of that class
STAND_INS: dict[str, Callable[[torch.nn.Module], dict[str, torch.nn.Module]]] = {
    "SwitchTransformersSparseMLP": lambda mlp: {"experts": _SwitchExperts(mlp.experts)},
    "SwitchTransformersTop1Router": lambda router: {"classifier": _fixed_dtype(router.classifier)},
}


@contextlib.contextmanager
def stand_ins(module: torch.nn.Module) -> Iterator[int]:
    """Within the block, the children that STAND_INS names of every submodule of `module`
    whose class it names are replaced by their stand-ins (the same values, traceable by
    torch.export); on exit, even by an exception, the originals are back. Yields the
    number of children replaced."""
    swaps: list[tuple[torch.nn.Module, str, torch.nn.Module, torch.nn.Module]] = []
    for owner in module.modules():
        make = STAND_INS.get(type(owner).__name__)
        for name, made in make(owner).items() if make else ():
            swaps.append((owner, name, getattr(owner, name), made))
    try:
        for parent, name, _, made in swaps:
            setattr(parent, name, made)
        yield len(swaps)
    finally:
        for parent, name, original, _ in reversed(swaps):
            setattr(parent, name, original)
