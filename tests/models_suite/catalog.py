"""The real-model suite: 16 public architectures built with random weights from configs.

Nine torchvision classifiers and seven transformers models (small configs, eval mode,
batch 1, float32), built exactly as a user would build them, never downloading
anything: `build(name, full)` returns the module and its example inputs. `full=True`
gives the issue's sizes (images 224x224, sequences of 128 tokens); `full=False` gives
CI sizes (smaller images where the architecture allows, same configs). The test suite
and benches/bench_vs_executorch.py both read this module. Needs the `models` extra
(torch, torchvision, transformers).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from tensorgraph.importers.torch_compat import import_transformers, load_torchvision


def _load_torchvision() -> object:
    """torchvision, importable with the CPU-only torch wheel (see torch_compat)."""
    return load_torchvision()


VISION = (
    "resnet50",
    "mobilenet_v3_large",
    "efficientnet_b0",
    "convnext_tiny",
    "densenet121",
    "vit_b_16",
    "squeezenet1_1",
    "regnet_y_400mf",
    "shufflenet_v2_x1_0",
)
TEXT = ("gpt2", "bert", "llama", "mistral", "qwen2", "t5_encoder", "whisper_encoder")
MODELS = VISION + TEXT
SEQUENCE = 128


class LastHidden(nn.Module):
    """A transformers model's `last_hidden_state` (a plain tensor, as exporters want)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self.model(*args).last_hidden_state


def _vision(name: str, full: bool) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    models = _load_torchvision().models
    # vit_b_16 fixes its image size (224 by default; 64 keeps the 16x16 patches); the
    # others take any size their downsampling allows (64 reaches 2x2 after five halvings).
    size = 224 if full else 64
    kwargs = {"image_size": size} if name == "vit_b_16" else {}
    module = getattr(models, name)(weights=None, **kwargs)
    if name == "vit_b_16":
        # torchvision zero-initialises the classifier head: every logit would be 0 and
        # any importer would "match". Random head weights make the output informative.
        nn.init.normal_(module.heads.head.weight, std=0.02)
    return module, (torch.randn(1, 3, size, size),)


def _transformers() -> object:
    return import_transformers()


def _decoder(config_class: str, **extra: object) -> nn.Module:
    transformers = _transformers()

    config = getattr(transformers, config_class)(
        vocab_size=1000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        use_cache=False,
        **extra,
    )
    return transformers.AutoModel.from_config(config, attn_implementation="sdpa")


def _text(name: str) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    transformers = _transformers()

    tokens = torch.randint(0, 1000, (1, SEQUENCE))
    if name == "gpt2":
        config = transformers.GPT2Config(
            vocab_size=1000,
            n_positions=256,
            n_embd=64,
            n_layer=2,
            n_head=4,
            use_cache=False,
            bos_token_id=0,
            eos_token_id=0,
        )
        model = transformers.GPT2Model(config)
    elif name == "bert":
        config = transformers.BertConfig(
            vocab_size=1000,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            max_position_embeddings=256,
        )
        model = transformers.BertModel(config, add_pooling_layer=False)
    elif name == "llama":
        model = _decoder("LlamaConfig")
    elif name == "mistral":
        model = _decoder("MistralConfig", sliding_window=64)
    elif name == "qwen2":
        model = _decoder("Qwen2Config")
    elif name == "t5_encoder":
        config = transformers.T5Config(
            vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_heads=4
        )
        model = transformers.T5EncoderModel(config)
    else:
        config = transformers.WhisperConfig(
            vocab_size=1000,
            num_mel_bins=80,
            d_model=64,
            encoder_layers=2,
            encoder_attention_heads=4,
            encoder_ffn_dim=128,
            decoder_layers=1,
            decoder_attention_heads=4,
            decoder_ffn_dim=128,
            max_source_positions=SEQUENCE // 2,
            pad_token_id=0,
            bos_token_id=0,
            eos_token_id=0,
            decoder_start_token_id=0,
        )
        model = transformers.WhisperModel(config).get_encoder()
        # The encoder's two convolutions halve the time axis: 128 frames -> 64 positions.
        return LastHidden(model), (torch.randn(1, 80, SEQUENCE),)
    return LastHidden(model), (tokens,)


BUILDERS: dict[str, Callable[[bool], tuple[nn.Module, tuple[torch.Tensor, ...]]]] = {
    **{name: (lambda full, name=name: _vision(name, full)) for name in VISION},
    **{name: (lambda full, name=name: _text(name)) for name in TEXT},
}


def build(name: str, full: bool = False, seed: int = 0) -> tuple[nn.Module, tuple]:
    """Model `name` (one of MODELS) in eval mode with seeded random weights, and its
    example inputs. Deterministic for a given (name, full, seed)."""
    torch.manual_seed(seed)
    module, inputs = BUILDERS[name](full)
    return module.eval(), inputs
