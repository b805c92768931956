"""A multi-layer perceptron: linear -> relu blocks and a final linear."""

from __future__ import annotations

from attrs import frozen

import tensorgraph as tg
from tensorgraph.models.common import Model, Weights, random_inputs
from tensorgraph.nn import linear


@frozen
class MLPConfig:
    batch: int = 32
    features: int = 512
    hidden: int = 1024
    layers: int = 3
    classes: int = 10


def mlp(config: MLPConfig = MLPConfig()) -> Model:
    g = tg.Graph("mlp")
    w = Weights(g)
    h = g.input("x", (config.batch, config.features), tg.float32)
    width = config.features
    for i in range(config.layers):
        h = tg.relu(
            linear(
                h,
                w.normal(f"w{i}", (width, config.hidden)),
                w.constant(f"b{i}", (config.hidden,), 0.01),
            )
        )
        width = config.hidden
    g.output(linear(h, w.normal("head", (width, config.classes))))
    return Model(g, lambda seed: random_inputs(g, seed))
