"""Outside models: 47 public architectures that played no part in building the importer.

The 16 models of `catalog.py` drove the importer's operator coverage; these were tried
afterwards, the way a new user would try them (random weights, small configs, eval,
batch 1, float32, never a download), to check that the importer covers the operator set
rather than those 16. Torchvision: classifiers and segmentation heads at 64x64 where the
architecture allows. Transformers: encoders, decoders and encoder-decoders from small
configs (2 layers, hidden 64, 4 heads, 32 tokens) through `AutoModel.from_config`, plus
vision and audio encoders. `build(name)` returns the module (its first output as one
tensor: `last_hidden_state`, a segmentation head's "out", or the plain output) and its
example inputs; deterministic for a given name.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from tensorgraph.importers.torch_compat import import_transformers, load_torchvision

TOKENS = 32
LAYERS = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4}
SMALL = {**LAYERS, "intermediate_size": 128}


class FirstOutput(nn.Module):
    """A model's main output as one tensor (what exporters and the importer want)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        out = self.model(*args)
        if hasattr(out, "last_hidden_state"):
            return out.last_hidden_state
        if isinstance(out, dict):  # a segmentation head's "out", or a ModelOutput's first
            return out["out"] if "out" in out else next(iter(out.values()))
        return out


def _vision(name: str, size: int = 64, **kwargs: object) -> tuple[nn.Module, tuple]:
    models = load_torchvision().models
    make = getattr(models, name, None) or getattr(models.segmentation, name)
    return make(weights=None, **kwargs), (torch.randn(1, 3, size, size),)


def _text(config_class: str, experts: str | None = None, **config: object) -> tuple:
    """A transformers text model; `experts` selects a mixture of experts' implementation
    (transformers' `experts_implementation`: "batched_mm" gathers each token's experts'
    weights and multiplies them in one batch, which torch.export can trace)."""
    transformers = import_transformers()
    made = getattr(transformers, config_class)(**{"vocab_size": 100, **config})
    extra = {"experts_implementation": experts} if experts else {}
    model = transformers.AutoModel.from_config(made, **extra)
    return model, (torch.randint(0, 100, (1, TOKENS)),)


def _encoder(model_class: str, config_class: str, inputs: tuple, **config: object):
    transformers = import_transformers()
    made = getattr(transformers, config_class)(**config)
    return getattr(transformers, model_class)(made), inputs


def _seq2seq(config_class: str, **config: object) -> tuple:
    """A transformers encoder-decoder LM called as one would for its logits: input_ids,
    its all-ones attention_mask, decoder_input_ids (half as many)."""
    transformers = import_transformers()
    made = getattr(transformers, config_class)(**{"vocab_size": 100, **config})
    model = transformers.AutoModelForSeq2SeqLM.from_config(made)
    ids = torch.randint(0, 100, (1, TOKENS))
    return model, (ids, torch.ones_like(ids), torch.randint(0, 100, (1, TOKENS // 2)))


def _image() -> tuple:
    return (torch.randn(1, 3, 32, 32),)


SEGMENTATION = {"weights_backbone": None}
VISION: dict[str, Callable[[], tuple]] = {
    "alexnet": lambda: _vision("alexnet"),
    "vgg11": lambda: _vision("vgg11", 32),
    "googlenet": lambda: _vision("googlenet", aux_logits=False, init_weights=True),
    "inception_v3": lambda: _vision("inception_v3", 80, aux_logits=False, init_weights=True),
    "mnasnet0_5": lambda: _vision("mnasnet0_5"),
    "mobilenet_v2": lambda: _vision("mobilenet_v2"),
    "mobilenet_v3_small": lambda: _vision("mobilenet_v3_small"),
    "resnext50_32x4d": lambda: _vision("resnext50_32x4d"),
    "regnet_x_400mf": lambda: _vision("regnet_x_400mf"),
    "efficientnet_v2_s": lambda: _vision("efficientnet_v2_s"),
    "swin_t": lambda: _vision("swin_t"),
    # MaxViT's 7x7 windows and grids need an image that halves to multiples of 7.
    "maxvit_t": lambda: _vision("maxvit_t", 224),
    "deeplabv3_mobilenet_v3_large": lambda: _vision("deeplabv3_mobilenet_v3_large", **SEGMENTATION),
    "lraspp_mobilenet_v3_large": lambda: _vision("lraspp_mobilenet_v3_large", **SEGMENTATION),
    "fcn_resnet50": lambda: _vision("fcn_resnet50", **SEGMENTATION),
}
TEXT: dict[str, Callable[[], tuple]] = {
    "distilbert": lambda: _text("DistilBertConfig", dim=64, n_layers=2, n_heads=4, hidden_dim=128),
    "roberta": lambda: _text("RobertaConfig", **SMALL),
    "xlm_roberta": lambda: _text("XLMRobertaConfig", **SMALL),
    "albert": lambda: _text("AlbertConfig", embedding_size=32, **SMALL),
    "electra": lambda: _text("ElectraConfig", embedding_size=32, **SMALL),
    "deberta_v2": lambda: _text("DebertaV2Config", **SMALL),
    "mpnet": lambda: _text("MPNetConfig", **SMALL),
    "mobilebert": lambda: _text(
        "MobileBertConfig",
        embedding_size=32,
        intra_bottleneck_size=32,
        true_hidden_size=32,
        **SMALL,
    ),
    "phi": lambda: _text("PhiConfig", **SMALL),
    "phi3": lambda: _text("Phi3Config", pad_token_id=0, **SMALL),
    "gemma": lambda: _text("GemmaConfig", head_dim=16, num_key_value_heads=2, **SMALL),
    "gemma2": lambda: _text("Gemma2Config", head_dim=16, num_key_value_heads=2, **SMALL),
    "qwen3": lambda: _text("Qwen3Config", head_dim=16, num_key_value_heads=2, **SMALL),
    "starcoder2": lambda: _text("Starcoder2Config", num_key_value_heads=2, **SMALL),
    "stablelm": lambda: _text("StableLmConfig", num_key_value_heads=2, **SMALL),
    "olmo": lambda: _text("OlmoConfig", **SMALL),
    "gpt_neox": lambda: _text("GPTNeoXConfig", **SMALL),
    "opt": lambda: _text("OPTConfig", ffn_dim=128, word_embed_proj_dim=64, **LAYERS),
    "bloom": lambda: _text("BloomConfig", hidden_size=64, n_layer=2, n_head=4),
    "falcon": lambda: _text("FalconConfig", **LAYERS),
    "gptj": lambda: _text("GPTJConfig", n_embd=64, n_layer=2, n_head=4, rotary_dim=8),
    "mixtral": lambda: _text(
        "MixtralConfig",
        experts="batched_mm",
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        **SMALL,
    ),
    # transformers' default experts (grouped_mm: tokens sorted by expert, histc counts,
    # a grouped matmul): imported as one gather_mm per projection
    "mixtral_grouped": lambda: _text(
        "MixtralConfig", num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, **SMALL
    ),
    "qwen2_moe": lambda: _text(
        "Qwen2MoeConfig",
        num_key_value_heads=2,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
        shared_expert_intermediate_size=64,
        **SMALL,
    ),
    "olmoe": lambda: _text(
        "OlmoeConfig", num_experts=4, num_experts_per_tok=2, pad_token_id=0, eos_token_id=1, **SMALL
    ),
    # transformers' only experts for it: a loop over the experts that got a token, which
    # the export runs through importers.stand_ins (one grouped matmul per projection);
    # capacity 8 of 32 tokens over 4 experts drops some tokens, as the router does
    "switch_transformers": lambda: _seq2seq(
        "SwitchTransformersConfig",
        d_model=64,
        d_kv=16,
        d_ff=128,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        num_experts=4,
        num_sparse_encoder_layers=1,
        num_sparse_decoder_layers=1,
        expert_capacity=8,
    ),
    "bart": lambda: _text(
        "BartConfig",
        d_model=64,
        encoder_layers=1,
        decoder_layers=1,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_ffn_dim=128,
    ),
    "vit": lambda: _encoder(
        "ViTModel", "ViTConfig", _image(), image_size=32, patch_size=8, **SMALL
    ),
    "clip_vision": lambda: _encoder(
        "CLIPVisionModel", "CLIPVisionConfig", _image(), image_size=32, patch_size=8, **SMALL
    ),
    "segformer": lambda: _encoder(
        "SegformerModel",
        "SegformerConfig",
        _image(),
        num_encoder_blocks=2,
        depths=[1, 1],
        sr_ratios=[2, 1],
        hidden_sizes=[16, 32],
        num_attention_heads=[1, 2],
        strides=[4, 2],
        patch_sizes=[7, 3],
        mlp_ratios=[2, 2],
    ),
    "siglip_vision": lambda: _encoder(
        "SiglipVisionModel", "SiglipVisionConfig", _image(), image_size=32, patch_size=8, **SMALL
    ),
    # Swin v2's attention bias comes out of an MLP over a table of log-spaced coordinates.
    "swinv2": lambda: _encoder(
        "Swinv2Model",
        "Swinv2Config",
        _image(),
        image_size=32,
        patch_size=2,
        embed_dim=16,
        depths=[2, 2],
        num_heads=[2, 4],
        window_size=4,
    ),
    "pvt_v2": lambda: _encoder(
        "PvtV2Model",
        "PvtV2Config",
        _image(),
        image_size=32,
        num_encoder_blocks=2,
        depths=[1, 1],
        sr_ratios=[2, 1],
        hidden_sizes=[16, 32],
        num_attention_heads=[1, 2],
        patch_sizes=[7, 3],
        strides=[4, 2],
        mlp_ratios=[2, 2],
    ),
    # DPT's reassemble stage upsamples with transposed convolutions.
    "dpt_depth": lambda: _encoder(
        "DPTForDepthEstimation",
        "DPTConfig",
        _image(),
        image_size=32,
        patch_size=8,
        backbone_out_indices=[0, 1, 2, 3],
        neck_hidden_sizes=[16, 32, 64, 64],
        fusion_hidden_size=32,
        **{**SMALL, "num_hidden_layers": 4},
    ),
    "wav2vec2": lambda: _encoder(
        "Wav2Vec2Model",
        "Wav2Vec2Config",
        (torch.randn(1, 1600),),
        conv_dim=(32, 32),
        conv_stride=(5, 2),
        conv_kernel=(10, 3),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        **SMALL,
    ),
}
MODELS = tuple(VISION) + tuple(TEXT)
SLOW = ("maxvit_t",)  # 224x224 is the smallest size it takes: about 20 s on 2 cores


def build(name: str, seed: int = 0) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """Outside model `name` (one of MODELS) in eval mode with seeded random weights, and
    its example inputs."""
    torch.manual_seed(seed)
    module, inputs = {**VISION, **TEXT}[name]()
    return FirstOutput(module).eval(), inputs
