"""A float64 evaluation of any graph, for finite differences and exact gradients: every
float value is held in float64, with the NumPy oracle's kernels run on a view of each
node whose float dtype reads as float64 (the kernels convert operands to `node.dtype`,
so they then compute in float64 instead of rounding to float32). Integer and bool values
keep their dtypes. Literal constants keep the values their float32 bytes hold."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

import tensorgraph as tg
from tensorgraph.ir.elementwise_fused import step_nodes
from tensorgraph.runtime import quant_kernels
from tensorgraph.runtime.kernels import KERNELS, constant_value

# Comparisons promote their operands' own dtypes, which float64 is not one of: NumPy's.
_COMPARE = {
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}


def _gather_mm(a: np.ndarray, b: np.ndarray, indices: np.ndarray) -> np.ndarray:
    """a[i] @ b[indices[i]] in float64 (the oracle's kernel computes in float32)."""
    rows = a.reshape(-1, *a.shape[-2:])
    out = np.stack([rows[i] @ b[e] for i, e in enumerate(indices.reshape(-1))])
    return out.reshape(*a.shape[:-1], b.shape[-1])


def _quantized_matmul(node: tg.ir.Node, args: list[np.ndarray]) -> np.ndarray:
    """x @ W.T (or x @ W) in float64, W dequantized in float64 (the oracle's kernel
    computes in float32)."""
    x, w, scales, *biases = args
    spec = quant_kernels.spec_of(node)
    wide = None if not biases else biases[0].astype(np.float64)
    if scales.dtype.kind == "f":  # affine: float scales; the floating modes' are bytes
        scales = scales.astype(np.float64)
    weight = quant_kernels.dequantize(w, scales, wide, spec, np.float64)
    if node.attr("transpose"):
        weight = np.swapaxes(weight, -1, -2)
    return np.matmul(x.astype(np.float64), weight)


class _Float64:
    """What a kernel reads of a float dtype: float64 everywhere."""

    name = "float64"
    kind = "float"
    is_float = True
    is_integer = False
    itemsize = 8

    def to_numpy(self) -> np.dtype:
        return np.dtype(np.float64)


class _Wide:
    """A node seen by a kernel with its float dtype read as float64."""

    def __init__(self, node: tg.ir.Node) -> None:
        self._node = node
        self.dtype = _Float64() if node.dtype.is_float else node.dtype

    def __getattr__(self, name: str) -> object:
        return getattr(self._node, name)


def _elementwise(graph: tg.Graph, node: tg.ir.Node, args: list[np.ndarray]) -> np.ndarray:
    """A fused chain step by step, each step's kernel in float64 (its steps' dtypes are
    inferred from the graph's operand dtypes, then read as float64 like every node's)."""
    operands = [(graph.node(i).shape, graph.node(i).dtype) for i in node.inputs]
    chain = list(args)
    for step in step_nodes(node, operands):
        value = np.asarray(KERNELS[step.op](_Wide(step), [chain[r] for r in step.inputs]))
        chain.append(value.astype(np.float64) if step.dtype.is_float else value)
    return chain[-1]


def evaluate(
    graph: tg.Graph, feeds: Mapping[str, np.ndarray], params: Mapping[str, np.ndarray]
) -> list[np.ndarray]:
    """Every returned output of `graph` in float64 (floats) for `feeds` and `params`."""
    values: dict[int, np.ndarray] = {}
    bound = {**graph.param_values, **params}
    for node in graph.nodes:
        if node.op == "input":
            value = np.asarray(feeds[node.name])
        elif node.op == "param":
            value = np.asarray(bound[node.name])
        elif node.op == "constant":
            value = constant_value(node)
        elif node.op == "gather_mm":
            value = _gather_mm(*(values[i] for i in node.inputs))
        elif node.op == "quantized_matmul":
            value = _quantized_matmul(node, [values[i] for i in node.inputs])
        elif node.op in _COMPARE:
            value = _COMPARE[node.op](*(values[i] for i in node.inputs))
        elif node.op == "elementwise":
            value = _elementwise(graph, node, [values[i] for i in node.inputs])
        else:
            value = np.asarray(KERNELS[node.op](_Wide(node), [values[i] for i in node.inputs]))
        if node.dtype.is_float:
            value = value.astype(np.float64)
        else:
            value = value.astype(node.dtype.to_numpy())
        assert value.shape == node.shape, (node, value.shape)
        values[node.id] = value
    return [values[o] for o in graph.returned]


def central_differences(
    graph: tg.Graph,
    feeds: Mapping[str, np.ndarray],
    params: Mapping[str, np.ndarray],
    name: str,
    step: float = 1e-5,
) -> np.ndarray:
    """d loss / d `name` by central differences of the float64 evaluation, one element at
    a time: (f(v + h e_i) - f(v - h e_i)) / 2h."""
    where = feeds if name in feeds else params
    base = np.asarray(where[name], np.float64)
    grad = np.zeros(base.shape)
    for i in np.ndindex(base.shape):
        values = []
        for sign in (1, -1):
            moved = base.copy()
            moved[i] += sign * step
            f = {**feeds, name: moved} if where is feeds else feeds
            p = {**params, name: moved} if where is params else params
            values.append(float(evaluate(graph, f, p)[0]))
        grad[i] = (values[0] - values[1]) / (2 * step)
    return grad
