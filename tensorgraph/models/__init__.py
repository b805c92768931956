"""The model zoo: real model graphs written with the builder, params bound to seeded
random weights. `build_model(name, **config)` returns a `Model` (graph + inputs)."""

from __future__ import annotations

from collections.abc import Callable

import attrs
from attrs import frozen

from tensorgraph.errors import GraphError
from tensorgraph.models.cnn import MobileNetConfig, ResNetConfig, mobilenet_v2, resnet18
from tensorgraph.models.common import Model, Weights
from tensorgraph.models.gpt2 import GPT2Config, gpt2
from tensorgraph.models.llama import LlamaConfig, LlamaDecodeConfig, llama, llama_decode
from tensorgraph.models.mlp import MLPConfig, mlp


@frozen
class ZooEntry:
    build: Callable[..., Model]
    config: type
    description: str


ZOO: dict[str, ZooEntry] = {
    "mlp": ZooEntry(mlp, MLPConfig, "3-layer perceptron with ReLU"),
    "llama": ZooEntry(
        llama, LlamaConfig, "Llama-style decoder prefill: RMSNorm, rotary, causal attention, SwiGLU"
    ),
    "llama_decode": ZooEntry(
        llama_decode,
        LlamaDecodeConfig,
        "one Llama decode step with per-layer KV caches (slice_update)",
    ),
    "gpt2": ZooEntry(gpt2, GPT2Config, "GPT-2 decoder: LayerNorm, GELU MLP, learned positions"),
    "resnet18": ZooEntry(resnet18, ResNetConfig, "ResNet-18 CNN, NCHW, folded batch norm"),
    "mobilenet_v2": ZooEntry(
        mobilenet_v2, MobileNetConfig, "MobileNetV2: inverted residuals with depthwise convolutions"
    ),
}


def build_model(name: str, **overrides: object) -> Model:
    """The zoo model `name` with config fields overridden by keyword (GraphError names an
    unknown model or config field)."""
    if name not in ZOO:
        raise GraphError(f"unknown model {name!r}; the zoo has: {', '.join(ZOO)}")
    entry = ZOO[name]
    fields = {f.name: f for f in attrs.fields(entry.config)}
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise GraphError(
            f"model {name!r}: unknown config field(s) {unknown}; fields: {', '.join(fields)}"
        )
    return entry.build(entry.config(**overrides))


__all__ = ["ZOO", "Model", "Weights", "ZooEntry", "build_model"]
