"""The models `tensorgraph generate` runs, each with the oracle its tokens are checked
against: the zoo Llama (the plain NumPy reference loop), hf-llama and hf:<model_type>
(a transformers causal LM from a small config with seeded random weights, imported by
`from_torch_generation`; transformers' own greedy `generate`).

Invariants: a `_GenerationModel` carries the entries to compile, the vocabulary size and
either an `expected(prompt, tokens)` oracle or None, which tells `cmd_generate` to run
the same converted program on the reference interpreter (a float32 oracle cannot give a
reduced-precision or quantized-cache model's tokens). Weights come from `--seed` alone,
so a run is reproducible. A missing torch/transformers or an unknown model_type is a
`UsageError`, never a traceback.
"""

from __future__ import annotations

import argparse

import numpy as np
from attrs import frozen

from tensorgraph.cli_args import UsageError
from tensorgraph.cli_precision import _converted, _precision
from tensorgraph.errors import TensorGraphError


@frozen
class _GenerationModel:
    """What `generate` runs and checks: the entries, the vocabulary size, and the
    expected token ids (batch, tokens) for a prompt (n,), named by `oracle`."""

    entries: dict
    vocab: int
    expected: object
    oracle: str


def _zoo_llama(args: argparse.Namespace, buckets: tuple[int, ...]) -> _GenerationModel:
    from tensorgraph.models.generation import llama_generation, llama_weights, reference_generate
    from tensorgraph.models.llama import LlamaConfig

    config = LlamaConfig()
    kv = {"kv_bits": args.kv_bits, "kv_group_size": args.kv_group_size}
    entries = llama_generation(
        config,
        max_seq=args.max_seq,
        buckets=buckets,
        seed=args.seed,
        prefill=args.prefill,
        **kv,
    )
    weights = llama_weights(config, args.seed)
    if _converted(args):  # the oracle is then the reference interpreter (cmd_generate)
        return _GenerationModel(_precision(args, entries), config.vocab, None, "")

    def expected(prompt: np.ndarray, tokens: int) -> np.ndarray:
        return reference_generate(config, weights, prompt, tokens, **kv).tokens

    return _GenerationModel(entries, config.vocab, expected, "the NumPy reference")


HF_LLAMA = {  # a small transformers LlamaConfig: grouped-query heads, random weights
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}


# The sizes `hf:<model_type>` shrinks a family's default config to, where the config
# has the field (gpt2's n_embd and the like are reached through transformers'
# attribute maps): small, but every structure of the family kept (grouped-query heads,
# experts, norms, rotary variants), so what needs importing is what the full model has.
HF_SMALL = {
    "vocab_size": 128,
    "hidden_size": 128,
    "intermediate_size": 256,
    "ffn_hidden_size": 256,  # Falcon's name for it (18,176 by default)
    "ffn_dim": 256,  # OPT's (3,072 by default)
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_kv_heads": 2,  # Falcon's name for it (71 by default)
    "rotary_dim": 16,  # GPT-J, CodeGen (64 by default, past head_dim)
    "head_dim": 32,  # MLX's smallest quantization group, so --kv-bits can take the cache
    "num_local_experts": 4,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 64,
    "sliding_window": 8,  # below any --max-seq worth a run: the cache's ring wraps
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def _hf_config(transformers: object, args: argparse.Namespace) -> object:
    """The transformers config of `args.model`: hf-llama's fixed small LlamaConfig, or
    the family's default config shrunk to HF_SMALL (UsageError naming an unknown
    model_type)."""
    if args.model == "hf-llama":
        return transformers.LlamaConfig(**HF_LLAMA, max_position_embeddings=args.max_seq)
    model_type = args.model.removeprefix("hf:")
    try:
        config = transformers.AutoConfig.for_model(model_type)
    except ValueError as err:
        raise UsageError(f"unknown transformers model_type {model_type!r}") from err
    for field, value in {**HF_SMALL, "max_position_embeddings": args.max_seq}.items():
        derived = isinstance(getattr(type(config), field, None), property)  # Falcon's head_dim
        if hasattr(config, field) and getattr(config, field) is not None and not derived:
            setattr(config, field, value)
    return config


def _hf_model(args: argparse.Namespace, buckets: tuple[int, ...]) -> _GenerationModel:
    """hf-llama or hf:<model_type>: a transformers causal LM from a small config with
    seeded random weights, imported by from_torch_generation."""
    name = args.model
    try:
        import torch

        from tensorgraph.importers.generation import from_torch_generation
        from tensorgraph.importers.torch_compat import import_transformers

        transformers = import_transformers()
        auto_model = transformers.AutoModelForCausalLM
    except ImportError as err:  # transformers imports its models lazily, on attribute access
        detail = str(err).splitlines()[0]
        raise UsageError(
            f"{name} needs torch, transformers and tensorgraph.importers.generation "
            f"({detail}); use MODEL llama"
        ) from err
    torch.manual_seed(args.seed)
    config = _hf_config(transformers, args)
    model = auto_model.from_config(config).eval()
    if args.dtype != "float32":  # torch's own half-precision model, imported as it is
        model = model.to(getattr(torch, args.dtype))
    entries = from_torch_generation(
        model, max_seq=args.max_seq, prompt_buckets=buckets, prefill=args.prefill
    )
    if args.kv_bits is not None:  # the imported float cache held quantized (any family)
        from tensorgraph.passes.quantize_states import quantize_graph_states, quantize_states

        try:
            first = quantize_graph_states(
                next(iter(entries.values())), args.kv_bits, args.kv_group_size
            )
            if not first.stats["quantized"]:
                why = "; ".join(f"{k}: {v}" for k, v in first.stats["kept"].items())
                raise UsageError(f"--kv-bits: no cache of {name} can be quantized ({why})")
            entries = quantize_states(entries, args.kv_bits, args.kv_group_size)
        except TensorGraphError as err:
            raise UsageError(str(err)) from err
    if _converted(args) or args.kv_bits is not None:  # the reference interpreter is the
        # oracle then (cmd_generate); --dtype already made torch's own model, so only
        # --quantize is left to apply
        quantized = _precision(args.__class__(**{**vars(args), "dtype": "float32"}), entries)
        return _GenerationModel(quantized, config.vocab_size, None, "")

    def expected(prompt: np.ndarray, tokens: int) -> np.ndarray:
        ids = torch.tensor(prompt[None].astype(np.int64))
        with torch.no_grad():  # no EOS stop: exactly `tokens` new ids, as ours
            out = model.generate(
                ids,
                max_new_tokens=tokens,
                min_new_tokens=tokens,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
            )
        return out[:, prompt.shape[0] :].numpy().astype(np.int32)

    return _GenerationModel(entries, config.vocab_size, expected, "transformers generate")
