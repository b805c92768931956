"""What every zoo model shares: seeded weights bound into the graph, and example inputs."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from attrs import frozen

import tensorgraph as tg
from tensorgraph.ir.builder import Tensor


class Weights:
    """Creates params bound to seeded random values, so `prog.run` needs only inputs.

    Scaled by 1/sqrt(fan_in) (fan_in = all dims but the last, or the last for 1-D), which
    keeps activations of the zoo's deep models in a range every backend agrees on."""

    def __init__(self, graph: tg.Graph, seed: int = 0) -> None:
        self.graph = graph
        self.rng = np.random.default_rng(seed)

    def normal(
        self,
        name: str,
        shape: tuple[int, ...],
        fan_in: int | None = None,
        dtype: tg.DType = tg.float32,
    ) -> Tensor:
        fan = fan_in if fan_in is not None else math.prod(shape[:-1]) if len(shape) > 1 else 1
        value = self.rng.standard_normal(shape) / math.sqrt(max(fan, 1))
        return self.graph.param(name, shape, dtype, value.astype(dtype.to_numpy()))

    def constant(
        self, name: str, shape: tuple[int, ...], value: float, dtype: tg.DType = tg.float32
    ) -> Tensor:
        array = np.full(shape, value, dtype.to_numpy())
        return self.graph.param(name, shape, dtype, array)

    def uniform(
        self,
        name: str,
        shape: tuple[int, ...],
        low: float,
        high: float,
        dtype: tg.DType = tg.float32,
    ) -> Tensor:
        value = self.rng.uniform(low, high, shape).astype(dtype.to_numpy())
        return self.graph.param(name, shape, dtype, value)


@frozen
class Model:
    """A zoo model: its graph (params bound) and a maker of example inputs by seed."""

    graph: tg.Graph
    make_inputs: Callable[[int], dict[str, np.ndarray]]

    def inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        return self.make_inputs(seed)

    @property
    def param_count(self) -> int:
        return sum(int(v.size) for v in self.graph.param_values.values())


def random_inputs(graph: tg.Graph, seed: int, integer_high: int = 2) -> dict[str, np.ndarray]:
    """Standard-normal floats and integers in [0, integer_high) for every input."""
    rng = np.random.default_rng(seed + 1000)
    result = {}
    for node in graph.inputs:
        dtype = node.dtype.to_numpy()
        if node.dtype.is_float:
            result[node.name] = rng.standard_normal(node.shape).astype(dtype)
        else:
            result[node.name] = rng.integers(0, integer_high, node.shape).astype(dtype)
    return result
