"""What every zoo model shares: checked configs, seeded weights bound into the graph,
example inputs, and the parameter count.

Invariants: a config is a frozen attrs value whose fields were checked when it was made
(a bad size raises GraphError naming `Config.field` and the value, before any node is
built); a model's params are all bound, so `prog.run(model.inputs(seed))` needs nothing
else; the same config and seed give bit-identical weights and inputs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TypeVar

import attrs
import numpy as np
from attrs import frozen

import tensorgraph as tg
from tensorgraph.errors import GraphError
from tensorgraph.ir.builder import Tensor
from tensorgraph.ir.dtypes import DTYPES, DType

# The element types a zoo model may be built in (weights, activations, float inputs).
MODEL_DTYPES = ("float32", "float16", "bfloat16")

Config = TypeVar("Config")


def _culprit(instance: object, attribute: attrs.Attribute) -> str:
    return f"{type(instance).__name__}.{attribute.name}"


def positive_int(instance: object, attribute: attrs.Attribute, value: object) -> None:
    """attrs validator: a Python int >= 1 (bool is refused: `True` is no size)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise GraphError(
            f"{_culprit(instance, attribute)} must be a positive int but got {value!r}"
        )


def non_negative_int(instance: object, attribute: attrs.Attribute, value: object) -> None:
    """attrs validator: a Python int >= 0 (a position or a seed)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise GraphError(
            f"{_culprit(instance, attribute)} must be a non-negative int but got {value!r}"
        )


def positive_float(instance: object, attribute: attrs.Attribute, value: object) -> None:
    """attrs validator: a finite int or float > 0."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise GraphError(
            f"{_culprit(instance, attribute)} must be a positive number but got {value!r}"
        )


def model_dtype(instance: object, attribute: attrs.Attribute, value: object) -> None:
    """attrs validator: the name of one of MODEL_DTYPES."""
    if value not in MODEL_DTYPES:
        raise GraphError(
            f"{_culprit(instance, attribute)} must be one of {', '.join(MODEL_DTYPES)} "
            f"but got {value!r}"
        )


def require(config: object, holds: bool, message: str) -> None:
    """Raise GraphError `Config: message` unless `holds` (cross-field config checks)."""
    if not holds:
        raise GraphError(f"{type(config).__name__}: {message}")


def make_config(
    config_type: type[Config], config: Config | None, overrides: Mapping[str, object]
) -> Config:
    """`config` (default `config_type()`) with the fields in `overrides` replaced.

    Raises GraphError naming a config of the wrong type, any unknown field, or (through
    the field validators) a bad value."""
    base = config_type() if config is None else config
    if not isinstance(base, config_type):
        raise GraphError(
            f"expected a {config_type.__name__} but got {type(base).__name__}: {base!r}"
        )
    names = [f.name for f in attrs.fields(config_type)]
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise GraphError(
            f"{config_type.__name__}: unknown config field(s) {unknown}; fields: {', '.join(names)}"
        )
    return attrs.evolve(base, **overrides) if overrides else base


class Weights:
    """Creates params bound to seeded random values, so `prog.run` needs only inputs.

    Scaled by 1/sqrt(fan_in) (fan_in = all dims but the last, or the last for 1-D), which
    keeps activations of the zoo's deep models in a range every backend agrees on. Values
    are drawn in float64 and rounded once to `dtype`, so a float16 model's weights are
    the float32 model's weights rounded."""

    def __init__(self, graph: tg.Graph, seed: int = 0, dtype: DType = tg.float32) -> None:
        self.graph = graph
        self.rng = np.random.default_rng(seed)
        self.dtype = dtype

    def normal(
        self,
        name: str,
        shape: tuple[int, ...],
        fan_in: int | None = None,
        dtype: DType | None = None,
    ) -> Tensor:
        """Normal(0, 1 / fan_in) weights."""
        dtype = dtype or self.dtype
        fan = fan_in if fan_in is not None else math.prod(shape[:-1]) if len(shape) > 1 else 1
        value = self.rng.standard_normal(shape) / math.sqrt(max(fan, 1))
        return self.graph.param(name, shape, dtype, value.astype(dtype.to_numpy()))

    def constant(
        self, name: str, shape: tuple[int, ...], value: float, dtype: DType | None = None
    ) -> Tensor:
        """A param filled with `value` (norm scales start at 1, biases at 0)."""
        dtype = dtype or self.dtype
        return self.graph.param(name, shape, dtype, np.full(shape, value, dtype.to_numpy()))

    def uniform(
        self,
        name: str,
        shape: tuple[int, ...],
        low: float,
        high: float,
        dtype: DType | None = None,
    ) -> Tensor:
        """Uniform [low, high) weights."""
        dtype = dtype or self.dtype
        value = self.rng.uniform(low, high, shape).astype(dtype.to_numpy())
        return self.graph.param(name, shape, dtype, value)


@frozen
class Model:
    """A zoo model: its graph (params bound) and a maker of example inputs by seed."""

    graph: tg.Graph
    make_inputs: Callable[[int], dict[str, np.ndarray]]

    def inputs(self, seed: int = 0) -> dict[str, np.ndarray]:
        """Example inputs for every graph input, the same for the same seed."""
        return self.make_inputs(seed)

    @property
    def param_count(self) -> int:
        return param_count(self.graph)


def param_count(graph: tg.Graph) -> int:
    """Elements in the graph's params (bound or not), from their declared shapes."""
    return sum(math.prod(node.shape) for node in graph.params)


def dtype_of(name: str) -> DType:
    """The DType named `name` (a config's checked `dtype` field)."""
    return DTYPES[name]


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
