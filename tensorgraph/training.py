"""A training step as one graph: `tg.train_step` and `train_step_from_gradients`.

`train_step_from_gradients(grad_graph, optimizer, wrt)` takes a graph whose returned
outputs are `[loss, grad_1, ..., grad_n]`, the gradients of the float scalar loss with
respect to the params `wrt` = p_1..p_n (what `tg.value_and_grad` makes), and gives the
step graph:

- each p_i becomes a state of the same name, shape and dtype, whose initial value
  (`Graph.state_values`) is p_i's bound value: the weights live in the state region and
  are updated in place by every call;
- the optimizer's moments are states `<p_i>.<moment>` (zeros at first: `w.m`, `w.v`),
  and a step counter state `optimizer.step` (int32, the number of calls made) where
  the update reads one (Adam's bias correction);
- every call returns the loss computed from the weights as they were before the call,
  and leaves the updated weights, moments and counter in their states
  (tensorgraph/optim.py gives the update's formulas). Params not in `wrt` stay params.

The states commit only when the whole call succeeds (runtime/state.py), so a failed step
leaves weights, moments and counter unchanged. `tg.train_step(graph, optimizer=...,
wrt=None)` is `train_step_from_gradients(tg.value_and_grad(graph, wrt), optimizer,
wrt)`. Compiled beside the inference graph (`tg.compile({"infer": g, "train": step})`)
the inference entry reads the same weights (tensorgraph/multi.py).

Errors (GraphError unless said): an optimizer that is not a `tg.optim` one; a loss that
is not a float scalar (DTypeError/ShapeError); a `wrt` name that is not a param of the
graph, or repeated; a number of gradients other than `wrt`'s; a gradient of another
shape or dtype than its param (ShapeError/DTypeError); a trained param with no bound
value (a weight needs a starting value); a state name the step would declare that the
graph already uses; a gradient graph that updates states of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

from tensorgraph.errors import DTypeError, GraphError, ShapeError
from tensorgraph.ir.api import Tensor, astype, float32, int32
from tensorgraph.ir.elementwise_fused import fuse_since
from tensorgraph.ir.graph import Graph
from tensorgraph.ir.node import Node, describe
from tensorgraph.ir.verify import verify
from tensorgraph.optim import Optimizer

STEP_STATE = "optimizer.step"  # the step counter's state name

__all__ = ["STEP_STATE", "train_step", "train_step_from_gradients"]


def train_step(
    graph: Graph,
    *,
    optimizer: Optimizer,
    wrt: Sequence[str] | str | None = None,
    expand: bool = True,
) -> Graph:
    """The training step of `graph` (its single output a float scalar loss) for
    `optimizer`, training the params `wrt` (None: every param, in graph order): see the
    module docstring. The gradients come from `tg.value_and_grad`; None trains what it
    differentiates by default (the float params but a quantized weight's frozen parts).
    `expand` goes to `value_and_grad`: True (the default) decomposes the fused ops whose
    backward pays for it on MLX (a faster step); False keeps them whole, which keeps
    fewer values for the backward: the better start for `tg.compile(step,
    memory_budget=...)` (benches/README.md, "The same comparison without autodiff's
    expansion": min-cut's saved bytes met at fewer FLOPs on both transformers)."""
    from tensorgraph import value_and_grad
    from tensorgraph.autodiff.reverse import trainable_params

    names = trainable_params(graph) if wrt is None else wrt
    gradients = value_and_grad(graph, wrt=names, expand=expand)
    return train_step_from_gradients(gradients, optimizer, names)


def train_step_from_gradients(
    grad_graph: Graph, optimizer: Optimizer, wrt: Sequence[str] | str | None = None
) -> Graph:
    """The step graph of `grad_graph` (returned outputs: the loss, then the gradient of
    each param of `wrt`, None meaning every param in graph order) for `optimizer`; see
    the module docstring for the result and the errors."""
    if not isinstance(optimizer, Optimizer):
        raise GraphError(
            f"optimizer must be a tg.optim optimizer (SGD, Adam, AdamW) but got {optimizer!r}"
        )
    if grad_graph.state_positions:  # its returned outputs would not be [loss, grads]
        raise GraphError(
            f"graph {grad_graph.name!r} updates states "
            f"({', '.join(grad_graph.state_positions)}); a training step of it is not supported"
        )
    params = {n.name: n for n in grad_graph.params}
    if wrt is None:
        names = [n.name for n in grad_graph.params]
    else:
        names = [wrt] if isinstance(wrt, str) else list(wrt)
    _check_wrt(grad_graph, names, params)
    returned = [grad_graph.node(i) for i in grad_graph.returned]
    if len(returned) != len(names) + 1:
        raise GraphError(
            f"graph {grad_graph.name!r} returns {len(returned)} outputs, but a loss and "
            f"{len(names)} gradients ({', '.join(names) or 'none'}) were expected"
        )
    loss, grads = returned[0], returned[1:]
    _check_loss(grad_graph, loss)
    for name, grad in zip(names, grads, strict=True):
        _check_gradient(params[name], grad)
    trained = set(names)
    nodes = [
        Node(n.id, "state", (), n.attrs, n.shape, n.dtype) if n.name in trained else n
        for n in grad_graph.nodes
    ]
    step = Graph.from_nodes(
        f"{grad_graph.name}_step",
        nodes,
        [loss.id],
        {k: v for k, v in grad_graph.param_values.items() if k not in trained},
        state_values={**grad_graph.state_values, **{k: grad_graph.param_values[k] for k in names}},
    )
    _emit_updates(step, optimizer, names, grads)
    verify(step)
    return step


def _check_wrt(graph: Graph, names: list[str], params: dict[str, Node]) -> None:
    for name in names:
        if name not in params:
            raise GraphError(
                f"graph {graph.name!r}: wrt names {name!r}, which is not a param "
                f"(params: {', '.join(params) or 'none'}); only params are trained"
            )
        if name not in graph.param_values:
            raise GraphError(
                f"graph {graph.name!r}: param {name!r} has no bound value; a trained "
                "weight starts from its value (bind it with graph.bind)"
            )
    if len(set(names)) != len(names):
        raise GraphError(f"graph {graph.name!r}: wrt names a param twice: {names}")


def _check_loss(graph: Graph, loss: Node) -> None:
    if not loss.dtype.is_float:
        raise DTypeError(
            f"graph {graph.name!r}: the loss {describe(loss)} is {loss.dtype}, not float"
        )
    if loss.shape != ():
        raise ShapeError(
            f"graph {graph.name!r}: the loss {describe(loss)} has shape {loss.shape}, not a scalar"
        )


def _check_gradient(param: Node, grad: Node) -> None:
    if grad.shape != param.shape:
        raise ShapeError(
            f"the gradient {describe(grad)} of param {param.name!r} is {grad.shape}, "
            f"but the param is {param.shape}"
        )
    if grad.dtype != param.dtype:
        raise DTypeError(
            f"the gradient {describe(grad)} of param {param.name!r} is {grad.dtype}, "
            f"but the param is {param.dtype}"
        )


def _emit_updates(step: Graph, optimizer: Optimizer, names: list[str], grads: list[Node]) -> None:
    """Append the optimizer's update of every trained param to `step` (its weights
    already states): the moments and counter as states, each new value as its update."""
    weights = {n.name: n.id for n in step.states}
    count = None
    if optimizer.needs_step:
        counter = step.state(STEP_STATE, (), int32)
        after = counter + 1  # MLX increments the step before the update reads it
        step.update_state(counter, after)
        count = astype(after, float32)
    for name, grad in zip(names, grads, strict=True):
        param = Tensor(step, weights[name])
        moments = {
            m: step.state(f"{name}.{m}", param.shape, param.dtype) for m in optimizer.moment_names
        }
        first = step.next_id
        update = optimizer.apply(param, Tensor(step, grad.id), moments, count)
        # Each new value one `elementwise` node (ir/elementwise_fused.py), written over
        # its state: the update's temporaries take no arena bytes beside the gradient.
        fused: dict[int, Tensor] = {}
        for m, value in update.moments.items():
            fused[value.id] = fuse_since(value, first, fused)
            step.update_state(moments[m], fused[value.id])
        step.update_state(param, fuse_since(update.param, first, fused))
