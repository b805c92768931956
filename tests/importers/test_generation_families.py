"""The causes that kept OPT and Falcon from generating and Switch Transformers from
importing, one small test each (tiny configs with random weights; the every-family test
of test_generation_import.py runs the CLI's configs, slow-marked):

- OPT derives its positions from a cumsum over a mask as long as the cache's
  data-dependent length: from_torch_generation passes `position_ids`, and the importer
  leaves out what only export's runtime checks read (the mask's length, an `.item()`);
- a multi-query Falcon writes one kv head whatever its config says: the cache takes its
  shapes from what the model writes;
- Falcon's config derives head_dim (a property): `hf:falcon` shrinks the rest;
- Switch Transformers' experts loop over the experts that got a token and its router
  casts a Linear in forward, both inside torch.export: `importers.stand_ins` swaps in
  traceable modules computing the same values for the export (a tiny sparse MLP here;
  the whole model is an outside model of tests/models_suite).
"""

from __future__ import annotations

import argparse

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the models extra is not installed")
pytest.importorskip("transformers", reason="the models extra is not installed")

import tensorgraph as tg  # noqa: E402
from tensorgraph.importers.generation import from_torch_generation  # noqa: E402
from tensorgraph.importers.stand_ins import stand_ins  # noqa: E402
from tensorgraph.models.generation import generate  # noqa: E402
from tests.importers.test_generation_import import (  # noqa: E402
    assert_same_tokens,
    transformers_greedy,
)
from tests.models_suite.catalog import _transformers  # noqa: E402

BACKENDS = ("numpy", "arena", "mlx")
PROMPT = [3, 17, 5, 29, 11]


def generates_like_transformers(model: torch.nn.Module, steps: int = 5) -> tg.MultiProgram:
    """Import `model` (max_seq 16, one bucket of 8) and check its greedy tokens on every
    backend against transformers' generate; returns the compiled program."""
    multi = tg.compile(from_torch_generation(model.eval(), max_seq=16, prompt_buckets=(8,)))
    want = transformers_greedy(model, PROMPT, steps)
    assert len(set(want)) > 1  # random weights large enough not to repeat one token
    for backend in BACKENDS:
        got = generate(multi, np.array(PROMPT), steps, backend=backend).tokens[0].tolist()
        assert_same_tokens(got, want, eos=model.config.eos_token_id)
    return multi


class _CheckedLengthOnly(torch.nn.Module):
    """OPT's pattern: a tensor as long as a data-dependent count, never used; export keeps
    the count's `.item()` for its runtime check `u0 >= 0` though the tensor is gone."""

    def forward(self, x: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        torch.ones(1, count + 3)
        return x * 2


def test_a_value_read_only_by_runtime_checks_is_not_imported() -> None:
    x = torch.randn(3)
    graph = tg.from_torch(_CheckedLengthOnly(), (x, torch.tensor(2)))
    assert "_local_scalar_dense" not in {node.op for node in graph.nodes}
    (got,) = tg.compile(graph).run({"x": x.numpy(), "count": np.int64(2)}, backend="numpy")
    np.testing.assert_allclose(got, x.numpy() * 2)


def test_opt_generates_with_the_positions_passed() -> None:
    transformers = _transformers()
    torch.manual_seed(0)
    config = transformers.OPTConfig(
        vocab_size=64,
        hidden_size=32,
        word_embed_proj_dim=32,
        ffn_dim=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=16,
        init_std=0.5,
    )
    generates_like_transformers(transformers.OPTForCausalLM(config))


@pytest.mark.parametrize(
    ("variant", "kv_heads"),
    [({"multi_query": True}, 1), ({"new_decoder_architecture": True, "num_kv_heads": 2}, 4)],
    ids=["multi_query", "new_decoder_architecture"],
)
def test_falcon_cache_holds_the_heads_its_layers_write(variant: dict, kv_heads: int) -> None:
    # multi-query: 1 head, though num_kv_heads defaults to the 4 attention heads; the new
    # architecture repeats its 2 kv heads to the 4 query heads before it writes the cache
    transformers = _transformers()
    torch.manual_seed(0)
    config = transformers.FalconConfig(
        vocab_size=64,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=4,
        max_position_embeddings=16,
        initializer_range=0.5,
        **variant,
    )
    multi = generates_like_transformers(transformers.FalconForCausalLM(config))
    states = {(s.name, s.shape) for s in multi.entries["decode"].graph.states}
    assert states == {(f"{kind}_cache_0", (1, kv_heads, 16, 8)) for kind in ("key", "value")}


def test_hf_config_shrinks_falcon_around_its_derived_head_dim() -> None:
    from tensorgraph.cli import HF_SMALL, _hf_config

    config = _hf_config(_transformers(), argparse.Namespace(model="hf:falcon", max_seq=32))
    assert config.num_kv_heads == 2 and config.hidden_size == HF_SMALL["hidden_size"]
    assert config.head_dim == HF_SMALL["hidden_size"] // HF_SMALL["num_attention_heads"]
    assert config.ffn_hidden_size <= 4 * config.hidden_size  # not its default 18,176


@pytest.mark.parametrize("family", ["gptj", "codegen"])
def test_hf_config_rotates_at_most_a_head(family: str) -> None:
    # their default rotary_dim (64) is past the shrunk head (128 / 4 heads = 32): the
    # model's own forward fails on it
    from tensorgraph.cli import _hf_config

    config = _hf_config(_transformers(), argparse.Namespace(model=f"hf:{family}", max_seq=32))
    assert config.rotary_dim <= config.hidden_size // config.num_attention_heads


@pytest.fixture(scope="module")
def switch_mlp() -> torch.nn.Module:
    """One Switch sparse MLP: 4 experts with room for 2 tokens each (of 12: some dropped)."""
    transformers = _transformers()  # first: it imports transformers without torchvision
    from transformers.models.switch_transformers import modeling_switch_transformers as switch

    torch.manual_seed(0)
    config = transformers.SwitchTransformersConfig(
        d_model=16, d_ff=32, num_experts=4, expert_capacity=2, router_jitter_noise=0.0
    )
    return switch.SwitchTransformersSparseMLP(config).eval()


def test_switch_stand_ins_compute_the_loop_values_dropped_tokens_included(switch_mlp) -> None:
    x = torch.randn(1, 12, 16, generator=torch.Generator().manual_seed(1))
    experts, classifier = switch_mlp.experts, switch_mlp.router.classifier
    with torch.no_grad():
        dispatch, _, _ = switch_mlp.router(x)
        want = switch_mlp(x)
        with stand_ins(switch_mlp) as swapped:
            assert swapped == 2  # the experts and the router's classifier
            assert switch_mlp.experts is not experts
            got = switch_mlp(x)
    dropped = dispatch.sum(-1) == 0
    assert 0 < int(dropped.sum()) < 12  # capacity 2 x 4 experts < 12 tokens
    assert torch.all(want[dropped] == 0)  # a dropped token's output is 0 in both
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    assert switch_mlp.experts is experts and switch_mlp.router.classifier is classifier


def test_switch_sparse_mlp_imports_and_matches_torch(switch_mlp) -> None:
    x = torch.randn(1, 12, 16, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = switch_mlp(x).numpy()
    graph = tg.from_torch(switch_mlp, (x,))
    assert "gather_mm" in {node.op for node in graph.nodes}
    prog = tg.compile(graph)
    for backend in BACKENDS:
        (got,) = prog.run({graph.inputs[0].name: x.numpy()}, backend=backend)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6, err_msg=backend)


def test_a_bfloat16_switch_router_casts_its_classifier_at_call(switch_mlp) -> None:
    # the router casts its bfloat16 classifier to float32 (router_dtype) in forward, for
    # good in eager torch; Module.to cannot swap the export's parameters, so the import
    # runs first here, on a module no eager call has cast yet
    import copy

    import ml_dtypes

    from tensorgraph.passes.to_dtype import rounding_tolerance

    mlp = copy.deepcopy(switch_mlp).to(torch.bfloat16)
    x = torch.randn(1, 12, 16, generator=torch.Generator().manual_seed(3)).bfloat16()
    graph = tg.from_torch(mlp, (x,))
    assert mlp.router.classifier.weight.dtype == torch.bfloat16  # the model as it was
    with torch.no_grad():
        want = mlp(x).float().numpy().astype(np.float64)
    prog = tg.compile(graph)
    feeds = {graph.inputs[0].name: x.float().numpy().astype(ml_dtypes.bfloat16)}
    (got,) = prog.run(feeds, backend="numpy")
    assert got.dtype == ml_dtypes.bfloat16
    bound = rounding_tolerance(prog.graph, tg.bfloat16, float(np.max(np.abs(want))))
    assert float(np.max(np.abs(got.astype(np.float64) - want))) <= bound
