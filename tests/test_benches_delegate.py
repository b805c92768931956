"""The issue-25 benches' comparisons at tiny sizes: every contender computes the same
values (not times). benches/bench_delegate_memory.py: tensorgraph's MLX mode, one lazy
MLX graph per call and the hand-written MLX models agree with each other and with torch;
benches/bench_decode_families.py: `generate` and the hand-written decode loop give
transformers' own greedy tokens."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the models extra is not installed")
pytest.importorskip("transformers", reason="the models extra is not installed")

BENCHES = Path(__file__).resolve().parents[1] / "benches"
sys.path.insert(0, str(BENCHES))
import bench_decode_families as families  # noqa: E402
import bench_delegate_memory as delegate  # noqa: E402


def torch_output(model: str, module: torch.nn.Module) -> np.ndarray:
    """The torch module's own output for the bench's feeds (the independent oracle)."""
    feeds = delegate.inputs_of(model, delegate.SIZES["tiny"])
    with torch.no_grad():
        if model == "llama-1b-shaped":
            logits = module(torch.from_numpy(feeds["input_ids"])).logits
            return logits[:, -1:].numpy()
        return module(*(torch.from_numpy(v) for v in feeds.values())).numpy()


@pytest.mark.parametrize(
    "model",
    [
        "whisper-encoder",
        "whisper-decoder",
        pytest.param("llama-1b-shaped", marks=pytest.mark.slow),
    ],
)
def test_delegate_contenders_agree_with_torch(model: str, tmp_path: Path) -> None:
    result = delegate.compare(model, "tiny", runs=0, save=tmp_path / "program.tgp")
    module = delegate.source_model(model, delegate.SIZES["tiny"])
    want = torch_output(model, module)
    for name in delegate.CONTENDERS:
        got = np.asarray(result[name][0])
        assert got.shape == want.shape, name
        assert delegate.rel_error(got, want) <= 1e-4, name
    plan = result["plan"]
    assert plan["constants"] > 0 and plan["arena"] > 0 and plan["io"] > 0
    if model == "llama-1b-shaped":  # the KV cache is the state region
        assert plan["state"] > 0


def test_delegate_peak_holds_the_resident_weights(tmp_path: Path) -> None:
    """A contender's measured peak counts its weights (the plan's constant segment)."""
    size, saved = delegate.SIZES["tiny"], tmp_path / "program.tgp"
    program = delegate.compile_program(
        "whisper-decoder", size, delegate.source_model("whisper-decoder", size)
    )
    program.save(saved)
    constants = delegate.plan_bytes("whisper-decoder", program, size)["constants"]
    for name in delegate.CONTENDERS:
        peak, resident = delegate.measure_peak("whisper-decoder", "tiny", name, saved)
        assert peak >= resident >= constants, name


@pytest.mark.slow
def test_lazy_graph_writes_the_state_as_tensorgraph_does() -> None:
    """LazyGraph's KV cache after a prefill equals the MLX backend's state."""
    import mlx.core as mx

    size = delegate.SIZES["tiny"]
    module = delegate.source_model("llama-1b-shaped", size)
    program = delegate.compile_program("llama-1b-shaped", size, module)
    entry = delegate.entry_of("llama-1b-shaped", program, size)
    feeds = {k: mx.array(v) for k, v in delegate.inputs_of("llama-1b-shaped", size).items()}
    state = program.new_state("mlx")
    program.run(f"prefill{size['prompt']}", dict(feeds), backend="mlx", state=state)
    lazy_state = {n.name: mx.zeros(n.shape) for n in entry.graph.states}
    delegate.LazyGraph(entry.graph)(feeds, lazy_state)
    for name, value in lazy_state.items():
        np.testing.assert_allclose(
            np.asarray(value), np.asarray(state.values[name]), rtol=1e-5, atol=1e-6
        )
        assert np.abs(np.asarray(value)[:, :, : size["prompt"]]).max() > 0, name


@pytest.mark.parametrize(
    "family",
    [
        "gemma2",
        "whisper",
        pytest.param("llama", marks=pytest.mark.slow),
        pytest.param("qwen2", marks=pytest.mark.slow),
    ],
)
def test_decode_contenders_give_transformers_tokens(family: str) -> None:
    """Gemma 2 (soft-capping, pre/post norms, (1 + w) norms, scaled embeddings) and
    Whisper's decoder (encode, then the self cache and the cross keys and values) are
    the fast cases; Llama and Qwen2 (q/k/v biases) run in the slow job."""
    result = families.compare(family, "tiny", prompt_len=5, tokens=6, runs=1)
    want = result["reference"]
    assert want.shape[1] >= 1
    if family == "whisper":  # not one token repeated: the comparison has teeth
        assert len(set(want[0].tolist())) > 1
    for name in families.CONTENDERS:
        tokens = result[name][0]
        assert tokens.shape == (1, 6), name
        np.testing.assert_array_equal(tokens[:, : want.shape[1]], want, err_msg=name)
    for name in families.CONTENDERS[1:]:  # the hand-written loops: tensorgraph's tokens
        np.testing.assert_array_equal(result[name][0], result[families.CONTENDERS[0]][0])
