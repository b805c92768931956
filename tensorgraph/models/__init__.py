"""The model zoo: real model graphs written with the builder, params bound to seeded
random weights, so `tg.compile(model.graph).run(model.inputs(seed))` needs nothing else.

`ZOO` maps each name to its builder, its default config (a frozen attrs class whose
fields can be overridden by keyword) and a one-line description; `build_model(name,
**config)` returns a `Model` (graph + example inputs). Every default config compiles
and runs in well under a second on two CPU cores.
"""

from __future__ import annotations

from collections.abc import Callable

from attrs import frozen

from tensorgraph.errors import GraphError
from tensorgraph.models.cnn import MobileNetConfig, ResNetConfig, mobilenet_v2, resnet18
from tensorgraph.models.common import Model, Weights, param_count
from tensorgraph.models.gpt2 import GPT2Config, gpt2
from tensorgraph.models.llama import LlamaConfig, LlamaDecodeConfig, llama, llama_decode
from tensorgraph.models.mlp import MLPConfig, mlp


@frozen
class ZooEntry:
    """A zoo model: `build(config=None, **overrides) -> Model`, its config class (whose
    no-argument instance is the default) and a one-line description."""

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
    """The zoo model `name` with config fields overridden by keyword. GraphError names an
    unknown model, an unknown config field, or a bad value (`LlamaConfig.heads ...`)."""
    if name not in ZOO:
        raise GraphError(f"unknown model {name!r}; the zoo has: {', '.join(ZOO)}")
    return ZOO[name].build(**overrides)


__all__ = [
    "ZOO",
    "GPT2Config",
    "LlamaConfig",
    "LlamaDecodeConfig",
    "MLPConfig",
    "MobileNetConfig",
    "Model",
    "ResNetConfig",
    "Weights",
    "ZooEntry",
    "build_model",
    "gpt2",
    "llama",
    "llama_decode",
    "mlp",
    "mobilenet_v2",
    "param_count",
    "resnet18",
]
