"""The zoo ResNet-18 and GPT-2 written by hand with mlx.nn, on the zoo's own weights,
for benches/bench_train.py: what an MLX user writes to train them.

Each model is an `nn.Module` holding the zoo graph's bound params (names with "." made
"_", as mlx.nn's parameter trees take them) and a forward pass in MLX's native idiom:
NHWC images with (out, kh, kw, in) convolution weights (transposed once here from the
zoo's NCHW layout, so the computation is the same), `mx.fast.layer_norm` and
`mx.fast.scaled_dot_product_attention` with the causal mask. `loss(model, x, y)` is
mlx.nn.losses.cross_entropy's mean over every position, the loss the bench gives
tensorgraph through `tg.nn.cross_entropy`.
"""

from __future__ import annotations

import math

import mlx.core as mx
import mlx.nn as nn
import numpy as np


def _key(name: str) -> str:
    return name.replace(".", "_")


class ZooWeights(nn.Module):
    """The zoo params as trainable arrays: `self[_key(name)]`."""

    def __init__(self, weights: dict[str, np.ndarray]) -> None:
        super().__init__()
        for name, value in weights.items():
            self[_key(name)] = mx.array(value)

    def w(self, name: str) -> mx.array:
        return self[_key(name)]


class ResNet18(ZooWeights):
    """tensorgraph.models.cnn.resnet18 in NHWC: conv weights (out, kh, kw, in), batch
    norm's per-channel scale and shift as (C,) vectors."""

    def __init__(self, weights: dict[str, np.ndarray], width: int) -> None:
        converted = {}
        for name, value in weights.items():
            if value.ndim == 4:
                value = value.transpose(0, 2, 3, 1)
            elif name.endswith((".bn.scale", ".bn.shift")):
                value = value.reshape(-1)
            converted[name] = np.ascontiguousarray(value)
        super().__init__(converted)
        self.width = width

    def _conv_bn(self, x: mx.array, name: str, stride: int = 1) -> mx.array:
        weight = self.w(f"{name}.w")
        y = mx.conv2d(x, weight, stride=stride, padding=weight.shape[1] // 2)
        return y * self.w(f"{name}.bn.scale") + self.w(f"{name}.bn.shift")

    def __call__(self, image: mx.array) -> mx.array:
        h = nn.relu(self._conv_bn(image, "stem", 2))
        h = nn.MaxPool2d(3, stride=2, padding=1)(h)
        channels = self.width
        for stage in range(4):
            out_ch = self.width * 2**stage
            for block in range(2):
                stride = 2 if stage > 0 and block == 0 else 1
                name = f"s{stage}.b{block}"
                y = nn.relu(self._conv_bn(h, f"{name}.c1", stride))
                y = self._conv_bn(y, f"{name}.c2")
                down = stride != 1 or channels != out_ch
                skip = self._conv_bn(h, f"{name}.down", stride) if down else h
                h = nn.relu(y + skip)
                channels = out_ch
        return h.mean(axis=(1, 2)) @ self.w("fc.w") + self.w("fc.b")


class GPT2(ZooWeights):
    """tensorgraph.models.gpt2.gpt2: learned embeddings, pre-LayerNorm blocks, tanh GELU,
    causal attention, untied head."""

    def __init__(self, weights: dict[str, np.ndarray], heads: int, layers: int) -> None:
        super().__init__(weights)
        self.heads, self.layers = heads, layers

    def _ln(self, x: mx.array, name: str) -> mx.array:
        return mx.fast.layer_norm(x, self.w(f"{name}.w"), self.w(f"{name}.b"), 1e-5)

    def _linear(self, x: mx.array, name: str) -> mx.array:
        return x @ self.w(f"{name}.w") + self.w(f"{name}.b")

    def __call__(self, tokens: mx.array) -> mx.array:
        batch, seq = tokens.shape
        h = self.w("wte")[tokens] + self.w("wpe")[:seq]
        dim = h.shape[-1]
        head_dim = dim // self.heads
        for i in range(self.layers):
            qkv = self._linear(self._ln(h, f"h{i}.ln1"), f"h{i}.attn")
            q, k, v = (
                qkv[..., j * dim : (j + 1) * dim]
                .reshape(batch, seq, self.heads, head_dim)
                .transpose(0, 2, 1, 3)
                for j in range(3)
            )
            a = mx.fast.scaled_dot_product_attention(
                q, k, v, scale=1.0 / math.sqrt(head_dim), mask="causal"
            )
            a = a.transpose(0, 2, 1, 3).reshape(batch, seq, dim)
            h = h + self._linear(a, f"h{i}.proj")
            x = nn.gelu_approx(self._linear(self._ln(h, f"h{i}.ln2"), f"h{i}.fc"))
            h = h + self._linear(x, f"h{i}.out")
        return self._ln(h, "ln_f") @ self.w("lm_head")


def loss(model: nn.Module, x: mx.array, y: mx.array) -> mx.array:
    """Mean cross-entropy of the model's logits (classes last) against integer `y`."""
    return nn.losses.cross_entropy(model(x), y, reduction="mean")
