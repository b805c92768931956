"""A multi-layer perceptron: `layers` blocks of linear -> ReLU, then a linear head."""

from __future__ import annotations

from attrs import field, frozen

import tensorgraph as tg
from tensorgraph.models.common import (
    Model,
    Weights,
    dtype_of,
    make_config,
    model_dtype,
    positive_int,
    random_inputs,
)
from tensorgraph.nn import linear


@frozen
class MLPConfig:
    """Sizes of the perceptron; `dtype` names the weights' and input's element type."""

    batch: int = field(default=32, validator=positive_int)
    features: int = field(default=512, validator=positive_int)
    hidden: int = field(default=1024, validator=positive_int)
    layers: int = field(default=3, validator=positive_int)
    classes: int = field(default=10, validator=positive_int)
    dtype: str = field(default="float32", validator=model_dtype)


def mlp(config: MLPConfig | None = None, /, **overrides: object) -> Model:
    """x (batch, features) -> logits (batch, classes); fields of `config` (default
    MLPConfig()) may be overridden by keyword."""
    c = make_config(MLPConfig, config, overrides)
    dtype = dtype_of(c.dtype)
    g = tg.Graph("mlp")
    w = Weights(g, dtype=dtype)
    h = g.input("x", (c.batch, c.features), dtype)
    for i in range(c.layers):
        weight = w.normal(f"w{i}", (h.shape[-1], c.hidden))
        h = tg.relu(linear(h, weight, w.constant(f"b{i}", (c.hidden,), 0.01)))
    g.output(linear(h, w.normal("head", (h.shape[-1], c.classes))))
    return Model(g, lambda seed: random_inputs(g, seed))
