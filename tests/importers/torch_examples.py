"""Plain PyTorch models for the importer's tests and the ExecuTorch comparison.

Written the way a PyTorch user writes them (nn.Linear weights, BatchNorm2d in eval mode,
rotary tables computed in forward), so the exported graphs are what exporters really
produce. Requires torch (the `torch` extra)."""

from __future__ import annotations

import math

import torch
from torch import nn

from tensorgraph.models.cnn import MOBILENET_V2_STAGES


class MLP(nn.Module):
    def __init__(self, features: int = 512, hidden: int = 1024, classes: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


class DecoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.heads = heads
        self.attn_norm, self.mlp_norm = RMSNorm(dim), RMSNorm(dim)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.gate = nn.Linear(dim, hidden, bias=False)
        self.up = nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        batch, seq, dim = h.shape
        head_dim = dim // self.heads
        # Rotary tables and the causal mask, rebuilt in every layer as exported code does.
        inv_freq = torch.exp(
            torch.arange(0, head_dim // 2, dtype=torch.float32)
            * (-2.0 * math.log(10000.0) / head_dim)
        )
        angles = torch.arange(seq, dtype=torch.float32)[:, None] * inv_freq[None, :]
        angles = torch.cat([angles, angles], dim=-1)
        cos, sin = angles.cos(), angles.sin()
        mask = torch.triu(torch.full((seq, seq), float("-inf")), diagonal=1)
        x = self.attn_norm(h)

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, seq, self.heads, head_dim).transpose(1, 2)

        q, k, v = split(self.wq(x)), split(self.wk(x)), split(self.wv(x))
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim) + mask
        attn = torch.softmax(scores, dim=-1) @ v
        h = h + self.wo(attn.transpose(1, 2).reshape(batch, seq, dim))
        x = self.mlp_norm(h)
        return h + self.down(torch.nn.functional.silu(self.gate(x)) * self.up(x))


class LlamaDecoder(nn.Module):
    def __init__(
        self, layers: int = 4, dim: int = 512, heads: int = 8, hidden: int = 1376, vocab: int = 1000
    ) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(DecoderLayer(dim, heads, hidden) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        for layer in self.layers:
            h = layer(h)
        return self.head(self.norm(h))


def conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    )


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.c1, self.c2 = conv_bn(cin, cout, 3, stride), conv_bn(cout, cout, 3)
        self.down = conv_bn(cin, cout, 1, stride) if stride != 1 or cin != cout else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skip = x if self.down is None else self.down(x)
        return torch.relu(self.c2(torch.relu(self.c1(x))) + skip)


class ResNet18(nn.Module):
    def __init__(self, width: int = 64, classes: int = 1000) -> None:
        super().__init__()
        self.stem = conv_bn(3, width, 7, 2)
        self.pool = nn.MaxPool2d(3, 2, 1)
        blocks, cin = [], width
        for stage in range(4):
            cout = width * 2**stage
            for block in range(2):
                blocks.append(BasicBlock(cin, cout, 2 if stage and not block else 1))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.avg = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.pool(torch.relu(self.stem(x))))
        return self.fc(torch.flatten(self.avg(x), 1))


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        mid = cin * expand
        layers = [] if expand == 1 else [conv_bn(cin, mid, 1), nn.ReLU6()]
        layers += [conv_bn(mid, mid, 3, stride, groups=mid), nn.ReLU6(), conv_bn(mid, cout, 1)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.residual else self.body(x)


class MobileNetV2(nn.Module):
    STAGES = MOBILENET_V2_STAGES  # (expansion, channels, repeats, first stride)

    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        layers, cin = [conv_bn(3, 32, 3, 2), nn.ReLU6()], 32
        for expand, cout, repeats, stride in self.STAGES:
            for r in range(repeats):
                layers.append(InvertedResidual(cin, cout, stride if r == 0 else 1, expand))
                cin = cout
        layers += [conv_bn(cin, 1280, 1), nn.ReLU6()]
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(1280, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).mean((2, 3)))


def examples(small: bool = False) -> dict[str, tuple[nn.Module, tuple[torch.Tensor, ...]]]:
    """The comparison's four models with example inputs (`small` for fast tests)."""
    torch.manual_seed(0)
    if small:
        models = {
            "mlp": (MLP(32, 64, 10), (torch.randn(4, 32),)),
            "llama": (LlamaDecoder(2, 64, 4, 128, 100), (torch.randint(0, 100, (1, 16)),)),
            "mobilenet_v2": (MobileNetV2(10), (torch.randn(1, 3, 32, 32),)),
            "resnet18": (ResNet18(8, 10), (torch.randn(1, 3, 32, 32),)),
        }
    else:
        models = {
            "mlp": (MLP(), (torch.randn(32, 512),)),
            "llama": (LlamaDecoder(), (torch.randint(0, 1000, (1, 128)),)),
            "mobilenet_v2": (MobileNetV2(), (torch.randn(1, 3, 224, 224),)),
            "resnet18": (ResNet18(), (torch.randn(1, 3, 224, 224),)),
        }
    for module, _ in models.values():
        module.eval()
        for m in module.modules():  # non-trivial batch-norm statistics
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.data.uniform_(0.5, 1.5)
    return models
