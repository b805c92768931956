"""What PyTorch's min-cut partitioner saves and recomputes for one training step: the
torch half of benches/bench_mincut.py.

`torch._functorch.aot_autograd.aot_function` traces `loss(params, *inputs)` into a joint
forward-backward graph and hands it to `min_cut_rematerialization_partition` (the
partitioner torch.compile uses), which cuts it into a forward graph, whose outputs after
the first `num_fwd_outputs` are the values saved for the backward, and a backward graph,
which may recompute forward ops from them. The recording compilers here run both graphs
eagerly and note:

- saved bytes: the storages of the saved outputs at run time, each counted once (a
  view and its base share one storage), leaving out storages of the step's inputs
  (parameters, tokens, targets: they are held whatever the partition);
- recompute: the backward's call_function nodes that are forward nodes of the joint
  graph (ancestors of its forward outputs; node names survive the partition), with their
  FLOPs in tensorgraph's cost model (planner/flops.py: matmul 2*M*N*K, attention its two
  matmuls plus 5 per score, normalisations and softmax 5 per element, reductions 1 per
  input element, layout and view ops 0, other ops 1 per output element), so the figures
  compare with `tg.compile(step, memory_budget=...)`'s recompute FLOPs.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from attrs import frozen
from torch._functorch.aot_autograd import aot_function, make_boxed_func
from torch._functorch.partitioners import min_cut_rematerialization_partition

# aten ops (overload packet names) that move or view bytes and compute nothing: 0 FLOPs,
# as planner/flops.py's LAYOUT_OPS (reshape, transpose, narrow, broadcast_to, cast,
# concat, pad, take, gather, arange, full).
LAYOUT = frozenset(
    {
        "view",
        "_unsafe_view",
        "reshape",
        "expand",
        "permute",
        "transpose",
        "t",
        "slice",
        "select",
        "unsqueeze",
        "squeeze",
        "alias",
        "clone",
        "cat",
        "embedding",
        "index",
        "gather",
        "_to_copy",
        "full",
        "zeros",
        "ones",
        "arange",
        "scalar_tensor",
        "detach",
        "split",
        "split_with_sizes",
        "constant_pad_nd",
        "lift_fresh_copy",
        "empty",
        "new_zeros",
        "new_empty",
    }
)
PER_ELEMENT_5 = frozenset({"native_layer_norm", "_softmax", "_log_softmax"})
PER_INPUT_ELEMENT = frozenset({"sum", "mean", "amax", "amin", "var", "var_mean", "max", "min"})
MATMULS = frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul"})
ATTENTION = frozenset(
    {
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_efficient_attention",
        "scaled_dot_product_attention",
    }
)


def _shape(node: object) -> tuple[int, ...]:
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else node
    if isinstance(value, (tuple, list)):
        value = value[0]
    return tuple(int(d) for d in value.shape) if isinstance(value, torch.Tensor) else ()


def node_flops(node: torch.fx.Node) -> int:
    """FLOPs of one aten call in planner/flops.py's cost model (module docstring)."""
    name = node.target.__name__.split(".")[0] if hasattr(node.target, "__name__") else ""
    if name in LAYOUT:
        return 0
    out = math.prod(_shape(node))
    args = [a for a in node.args if isinstance(a, torch.fx.Node)]
    if name in MATMULS:
        a = _shape(args[1] if name in ("addmm", "baddbmm") else args[0])
        return 2 * out * (a[-1] if a else 1)
    if name in ATTENTION:
        q, k = _shape(args[0]), _shape(args[1])
        scores = math.prod(q[:-1]) * k[-2]
        return 4 * scores * q[-1] + 5 * scores
    if name in PER_ELEMENT_5:
        return 5 * out
    if name in PER_INPUT_ELEMENT:
        return math.prod(_shape(args[0])) if args else out
    return out


def _forward_names(joint: torch.fx.GraphModule, num_fwd_outputs: int) -> frozenset[str]:
    """Names of the joint graph's forward nodes: ancestors of its forward outputs."""
    (output,) = [n for n in joint.graph.nodes if n.op == "output"]
    stack = [a for a in output.args[0][:num_fwd_outputs] if isinstance(a, torch.fx.Node)]
    seen: set[str] = set()
    while stack:
        node = stack.pop()
        if node.name not in seen:
            seen.add(node.name)
            stack.extend(node.all_input_nodes)
    return frozenset(seen)


@frozen
class MinCutStep:
    """One min-cut partitioned training step: `saved_bytes` (saved storages, inputs
    left out), `saved` (how many saved tensors, inputs left out), `recomputed` (aten
    op names the backward recomputes), `recompute_flops`, `loss` and `grads` (the
    step's values, for checking the two sides agree)."""

    saved_bytes: int
    saved: int
    recomputed: tuple[str, ...]
    recompute_flops: int
    loss: float
    grads: dict[str, torch.Tensor]


def min_cut_step(
    module: torch.nn.Module,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    inputs: tuple[torch.Tensor, ...],
    target: torch.Tensor,
) -> MinCutStep:
    """The min-cut partition of `loss_fn(module(*inputs), target)`'s training step
    (gradients of every parameter), run once."""
    params = dict(module.named_parameters())
    # Buffers (a rotary table) are inputs of the traced step too, as the parameters
    # are: aot_function traces with fake tensors and refuses a real one inside.
    buffers = dict(module.named_buffers())
    names = list(params) + list(buffers)
    record: dict[str, object] = {}

    def partition(joint: torch.fx.GraphModule, joint_inputs: object, **kwargs: object):
        record["forward"] = _forward_names(joint, kwargs["num_fwd_outputs"])
        record["num_fwd_outputs"] = kwargs["num_fwd_outputs"]
        return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)

    def fw_compiler(gm: torch.fx.GraphModule, example: object) -> Callable:
        def run(*args: torch.Tensor) -> object:
            outs = gm(*args)
            held = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
            storages: dict[int, int] = {}
            count = 0
            for t in outs[record["num_fwd_outputs"] :]:
                if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in held:
                    count += 1
                    storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            record["saved_bytes"], record["saved"] = sum(storages.values()), count
            return outs

        return make_boxed_func(run)

    def bw_compiler(gm: torch.fx.GraphModule, example: object) -> Callable:
        forward = record["forward"]
        again = [n for n in gm.graph.nodes if n.op == "call_function" and n.name in forward]
        record["recomputed"] = tuple(str(n.target) for n in again)
        record["recompute_flops"] = sum(node_flops(n) for n in again)
        return make_boxed_func(gm)

    def step(*args: torch.Tensor) -> torch.Tensor:
        values = dict(zip(names, args[: len(names)], strict=True))
        out = torch.func.functional_call(module, values, args[len(names) : -1])
        return loss_fn(out, args[-1])

    compiled = aot_function(step, fw_compiler, bw_compiler, partition_fn=partition)
    leaves = [p.detach().clone().requires_grad_(True) for p in params.values()]
    fixed = [b.detach().clone() for b in buffers.values()]
    loss = compiled(*leaves, *fixed, *inputs, target)
    loss.backward()
    return MinCutStep(
        record["saved_bytes"],
        record["saved"],
        record["recomputed"],
        record["recompute_flops"],
        float(loss.detach()),
        {n: leaf.grad for n, leaf in zip(params, leaves, strict=True)},
    )
