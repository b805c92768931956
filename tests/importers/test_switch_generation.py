"""Switch Transformers (a T5-like encoder-decoder whose sparse layers route each token to
one of E experts) generates through from_torch_seq2seq_generation: its export runs
under the stand-ins of `importers.stand_ins` (experts as one grouped matmul, the router's
cast-at-call classifier), and the tokens equal transformers' own greedy `generate` on
every backend.

The config drops tokens: an expert takes at most `expert_capacity` (2) tokens of a
sequence, in order, and transformers' router applies that in eval as in training (only
its jitter noise is training-only). A dropped token's expert output is 0; the test checks
that the sources it uses do drop tokens in transformers' own run, so the stand-ins' drop
path is what the tokens depend on. The source is padded on the right to SOURCE_LEN, and
a token's priority is the count of earlier tokens routed to its expert, so padding never
changes which real token is dropped. One export per module (about 10 s)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the models extra is not installed")
pytest.importorskip("transformers", reason="the models extra is not installed")

import tensorgraph as tg  # noqa: E402
from tensorgraph.importers.seq2seq_generation import from_torch_seq2seq_generation  # noqa: E402
from tensorgraph.models.seq2seq_generation import decoding_rules, generate_seq2seq  # noqa: E402
from tests.models_suite.catalog import _transformers  # noqa: E402

MAX_SEQ, SOURCE_LEN, TOKENS, VOCAB, CAPACITY = 16, 12, 8, 96, 2


def build() -> torch.nn.Module:
    """A seeded Switch Transformers of 2 + 2 layers, one sparse layer of 4 experts on
    each side, each expert taking at most CAPACITY tokens of a sequence."""
    transformers = _transformers()
    torch.manual_seed(0)
    config = transformers.SwitchTransformersConfig(
        vocab_size=VOCAB,
        d_model=64,
        d_kv=16,
        d_ff=128,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        num_experts=4,
        num_sparse_encoder_layers=1,
        num_sparse_decoder_layers=1,
        expert_capacity=CAPACITY,
        decoder_start_token_id=0,
        initializer_factor=8.0,  # wide enough that greedy tokens depend on the source
    )
    return transformers.SwitchTransformersForConditionalGeneration(config).eval()


@pytest.fixture(scope="module")
def imported() -> tuple[torch.nn.Module, tg.MultiProgram]:
    model = build()
    entries = from_torch_seq2seq_generation(model, max_seq=MAX_SEQ, source_len=SOURCE_LEN)
    return model, tg.compile(entries)


def source(seed: int) -> np.ndarray:
    """Seeded source ids, shorter than SOURCE_LEN (the encode entry pads them)."""
    return np.random.default_rng(seed).integers(3, VOCAB - 3, SOURCE_LEN - 1 - seed)


def transformers_run(model: torch.nn.Module, src: np.ndarray) -> tuple[list[int], int]:
    """The new tokens of transformers' greedy generate, and how many source tokens its
    encoder's routers dropped (an all-zero dispatch row: over capacity)."""
    dropped = []
    routers = [m for m in model.get_encoder().modules() if type(m).__name__.endswith("Top1Router")]
    hooks = [
        r.register_forward_hook(
            lambda _m, _i, out: dropped.append(int((out[0].sum(-1) == 0).sum()))
        )
        for r in routers
    ]
    try:
        with torch.no_grad():
            out = model.generate(
                torch.tensor(src[None]),
                do_sample=False,
                max_new_tokens=TOKENS,
                min_new_tokens=TOKENS,
            )
    finally:
        for hook in hooks:
            hook.remove()
    return out[0, -TOKENS:].tolist(), sum(dropped)


@pytest.mark.parametrize("backend", ["numpy", "arena", "mlx"])
def test_tokens_equal_transformers_generate_with_dropped_tokens(imported, backend) -> None:
    model, program = imported
    rules = decoding_rules(model.generation_config)
    state = program.new_state(backend)
    seen = []
    for seed in (0, 1):  # the second source on the same state: nothing stale is read
        src = source(seed)
        want, dropped = transformers_run(model, src)
        assert dropped > 0  # the capacity drop is exercised, not only the routing
        result = generate_seq2seq(program, src, TOKENS, rules=rules, backend=backend, state=state)
        assert result.tokens.shape == (1, TOKENS) and result.tokens.dtype == np.int32
        assert result.tokens[0].tolist() == want
        seen.append(want)
    assert seen[0] != seen[1]  # the sources give different tokens: the check has teeth


def test_the_import_leaves_the_model_as_it_was(imported) -> None:
    """The stand-ins are swapped back: the experts are transformers' own modules again,
    and the router's classifier a plain Linear."""
    model, _ = imported
    kinds = {type(m).__name__ for m in model.modules()}
    assert "SwitchTransformersExperts" in kinds and "Linear" in kinds
    assert not {"_SwitchExperts", "_CastAtCallLinear"} & kinds
