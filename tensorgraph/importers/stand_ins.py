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
   holds cannot be swapped ("Couldn't swap Linear.weight"). The stand-in classifier wraps
   the same Linear: its `.to(dtype)` only records the dtype, and each call casts the
   weight and bias to it, which is the same linear map (a bfloat16 model's classifier
   computing in float32) with no parameter swapped.

Swapping back restores the original modules, so the caller's model is left as it was
(the router's classifier included: eager torch casts it for good on its first call).
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


class _CastAtCallLinear(torch.nn.Module):
    """A Linear whose `.to(dtype)` casts nothing: it records the dtype and returns itself,
    and each call casts the weight and bias to it (a no-op where they have it)."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.linear, self.dtype = linear, linear.weight.dtype

    def to(self, *args: object, **kwargs: object) -> torch.nn.Module:
        dtype = kwargs.get("dtype", args[0] if args else None)
        if not isinstance(dtype, torch.dtype) or len(args) + len(kwargs) != 1:
            return super().to(*args, **kwargs)
        self.dtype = dtype
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = self.linear.bias
        bias = None if bias is None else bias.to(self.dtype)
        return torch.nn.functional.linear(x, self.linear.weight.to(self.dtype), bias)


# transformers class name -> {child name: its stand-in} for a module of that class
STAND_INS: dict[str, Callable[[torch.nn.Module], dict[str, torch.nn.Module]]] = {
    "SwitchTransformersSparseMLP": lambda mlp: {"experts": _SwitchExperts(mlp.experts)},
    "SwitchTransformersTop1Router": lambda router: {
        "classifier": _CastAtCallLinear(router.classifier)
    },
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
