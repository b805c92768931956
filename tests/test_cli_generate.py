"""`tensorgraph generate`: runs end to end through `python -m tensorgraph.cli` and
prints tokens, rates, memory and the reference check; a token mismatch exits 1; bad
arguments exit 2 with one line and no traceback, before anything is compiled."""

import pytest

from tensorgraph import cli
from tensorgraph.models import generation_reference
from tests.test_cli import tensorgraph

SMALL = ["--buckets", "4,8", "--max-seq", "16", "--prompt-len", "5", "--tokens", "4"]


@pytest.mark.parametrize("backend", ["numpy", "arena", "mlx"])
def test_generate_prints_tokens_rates_memory_and_the_check(backend) -> None:
    result = tensorgraph("generate", "llama", *SMALL, "--backend", backend)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "entries prefill4, prefill8, decode4, decode8, decode (max_seq 16)" in out
    assert "prompt: 5 tokens (seed 0), prefill bucket 8" in out  # smallest bucket >= 5
    (tokens,) = [line for line in out.splitlines() if line.startswith("tokens: ")]
    ids = [int(t) for t in tokens.split()[1:]]
    assert len(ids) == 4 and all(0 <= t < 512 for t in ids)  # default vocab 512
    assert "prefill: " in out and "tokens/s" in out and "(3 steps" in out
    assert "memory per entry (arena): prefill4 " in out and "decode " in out
    assert "memory footprint:" in out and "state region" in out and "  total " in out
    assert out.rstrip().endswith("tokens match the NumPy reference: yes")


def test_generate_tokens_agree_across_backends_and_seeds_differ() -> None:
    def ids(*extra: str) -> str:
        result = tensorgraph("generate", "llama", *SMALL, *extra)
        assert result.returncode == 0, result.stderr
        return next(line for line in result.stdout.splitlines() if line.startswith("tokens: "))

    assert ids("--backend", "numpy") == ids("--backend", "arena")
    assert ids("--backend", "numpy", "--seed", "1") != ids("--backend", "numpy")


def test_a_token_mismatch_exits_one(monkeypatch, capsys) -> None:
    real = generation_reference.reference_generate

    def shifted(config, weights, prompt, tokens, **kv):
        result = real(config, weights, prompt, tokens, **kv)
        wrong = (result.tokens + 1) % config.vocab
        return generation_reference.ReferenceGeneration(
            wrong, result.keys, result.values, result.logits
        )

    monkeypatch.setattr("tensorgraph.models.generation.reference_generate", shifted)
    assert cli.main(["generate", "llama", *SMALL, "--backend", "numpy"]) == 1
    out = capsys.readouterr().out
    assert "tokens match the NumPy reference: NO (first difference at new token 0" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["gpt2"], "argument MODEL: expects llama, hf-llama or hf:<model_type>"),
        (["llama", "--prompt-len", "0"], "--prompt-len: expects a positive int but got '0'"),
        (["llama", "--tokens", "-3"], "--tokens: expects a positive int but got '-3'"),
        (["llama", "--buckets", "8,x"], "--buckets: expects comma-separated positive ints"),
        (["llama", "--buckets", ""], "--buckets: expects comma-separated positive ints"),
        (["llama", "--buckets", "0,8"], "--buckets: expects comma-separated positive ints"),
        (["llama", "--max-seq", "0"], "--max-seq: expects a positive int but got '0'"),
        (["llama", "--seed", "-1"], "--seed: expects a non-negative int but got '-1'"),
        (["llama", "--backend", "tpu"], "argument --backend: invalid choice: 'tpu'"),
        (
            ["llama", "--buckets", "4,8", "--prompt-len", "9"],
            "RunError: prompt length 9 is longer than the largest prefill bucket 8",
        ),
        (
            ["llama", "--max-seq", "16", "--buckets", "16", "--prompt-len", "10", "--tokens", "7"],
            "RunError: prompt length 10 + 7 new tokens = 17 is past the cache length max_seq 16",
        ),
        (["llama", "--max-seq", "16", "--buckets", "32"], "no bucket of [32] fits --max-seq 16"),
        (["llama", *SMALL, "--group-size", "32"], "take effect only with --quantize BITS"),
        (["llama", *SMALL, "--quantize", "7"], "argument --quantize: invalid choice: 7"),
        (
            ["llama", *SMALL, "--quantize", "4", "--quant-mode", "nvfp4", "--group-size", "64"],
            "nvfp4 quantization takes group sizes (16,), not 64",
        ),
        (["llama", *SMALL, "--dtype", "int8"], "argument --dtype: invalid choice: 'int8'"),
        (
            ["hf-llama", *SMALL, "--kv-bits", "8"],
            "--kv-bits: no cache of hf-llama can be quantized (key_cache_0: last axis",
        ),
    ],
)
def test_bad_arguments_exit_two_with_one_line(args, message, capsys) -> None:
    assert cli.main(["generate", *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "", "nothing ran"
    (line,) = captured.err.strip().splitlines()
    assert message in line and "Traceback" not in captured.err


def test_generate_help_gives_every_default(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    assert cli.main(["generate", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for option, default in [
        ("--prompt-len", 16),
        ("--tokens", 16),
        ("--backend", "mlx"),
        ("--buckets", "32,128,512"),
        ("--max-seq", 512),
        ("--seed", 0),
    ]:
        assert option in text and f"(default: {default})" in text, option
    assert "hf-llama" in text


def test_hf_llama_matches_transformers_generate() -> None:
    """The imported transformers Llama (random weights from a small config, grouped-query
    heads) generates the token ids of its own greedy `generate`, through the real entry
    point (which must import transformers beside the CPU-only torch wheel)."""
    args = ["--buckets", "8,16", "--max-seq", "32", "--prompt-len", "5", "--tokens", "6"]
    result = tensorgraph("generate", "hf-llama", *args, "--backend", "numpy")
    assert result.returncode == 0, result.stderr
    assert "hf-llama: entries prefill8, prefill16, decode (max_seq 32)" in result.stdout
    assert "prompt: 5 tokens (seed 0), prefill bucket 8" in result.stdout
    (tokens,) = [line for line in result.stdout.splitlines() if line.startswith("tokens: ")]
    assert len(tokens.split()) == 1 + 6
    assert result.stdout.rstrip().endswith("tokens match transformers generate: yes")


def test_quantized_generation_matches_the_reference_interpreter() -> None:
    """4-bit weights at float32 compute: MLX's tokens equal the reference interpreter's
    on the same quantized program, and the footprint counts the quantized weights."""
    result = tensorgraph("generate", "llama", *SMALL, "--quantize", "4")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "llama (float32 4-bit affine): entries" in out
    assert "4-bit affine, group 64" in out
    assert out.rstrip().endswith(
        "tokens match the NumPy reference interpreter (float32 4-bit affine program): yes"
    )


def test_bfloat16_generation_is_checked_within_its_rounding() -> None:
    result = tensorgraph("generate", "llama", *SMALL, "--dtype", "bfloat16")
    assert result.returncode == 0, result.stderr
    (check,) = [line for line in result.stdout.splitlines() if line.startswith("first logits")]
    assert check.endswith("bfloat16 rounding): yes")
    assert "    bfloat16 " in result.stdout  # the weights' kind in the footprint


def test_a_quantized_kv_cache_generates_the_reference_tokens_in_less_state() -> None:
    def state_bytes(stdout: str) -> int:
        (line,) = [x for x in stdout.splitlines() if x.strip().startswith("state region")]
        return int(line.split()[-2].replace(",", ""))

    full = tensorgraph("generate", "llama", *SMALL)
    result = tensorgraph("generate", "llama", *SMALL, "--kv-bits", "8")
    assert result.returncode == 0, result.stderr
    assert "llama (float32 8-bit KV cache): entries" in result.stdout
    assert result.stdout.rstrip().endswith("tokens match the NumPy reference: yes")
    # a byte per value plus a float32 scale and bias per 64: (1 + 8/64) / 4 = 0.28
    assert state_bytes(result.stdout) <= 0.30 * state_bytes(full.stdout)


HF_SMALL_ARGS = ["--max-seq", "32", "--buckets", "8", "--prompt-len", "6", "--tokens", "5"]


@pytest.mark.parametrize("family", ["qwen3", "gemma", "olmoe", "starcoder2"])
def test_any_transformers_family_generates_transformers_tokens(family: str) -> None:
    """hf:<model_type>: the family's default config shrunk (cli.HF_SMALL), random weights,
    imported with its static cache: qk-norm (qwen3), scaled embeddings and gelu (gemma),
    experts (olmoe), biases and layer norm (starcoder2)."""
    result = tensorgraph("generate", f"hf:{family}", *HF_SMALL_ARGS)
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip().endswith("tokens match transformers generate: yes")


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("hf:nonsense", "unknown transformers model_type 'nonsense'"),
        ("hf:", "expects llama, hf-llama or hf:<model_type>"),
        ("gemma2", "expects llama, hf-llama or hf:<model_type>"),
    ],
)
def test_a_model_that_is_no_family_exits_two(model: str, message: str) -> None:
    result = tensorgraph("generate", model, *HF_SMALL_ARGS)
    assert result.returncode == 2
    (line,) = result.stderr.strip().splitlines()
    assert message in line and "Traceback" not in result.stderr


def test_a_family_the_importer_cannot_take_names_what_is_missing() -> None:
    # qwen3_next's first layers are linear attention (a recurrent state, not a KV cache)
    result = tensorgraph("generate", "hf:qwen3_next", *HF_SMALL_ARGS)
    assert result.returncode == 2
    last = result.stderr.strip().splitlines()[-1]
    assert "GraphError" in last and "LinearAttentionLayer" in last


@pytest.mark.parametrize("family", ["mistral", pytest.param("gemma2", marks=pytest.mark.slow)])
def test_a_sliding_window_family_generates_transformers_tokens(family: str) -> None:
    """hf:mistral (every layer slides) and hf:gemma2 (alternating with global layers):
    HF_SMALL's window of 8 under --max-seq 32, so 6 + 5 tokens wrap the rings."""
    result = tensorgraph("generate", f"hf:{family}", *HF_SMALL_ARGS)
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip().endswith("tokens match transformers generate: yes")


SAMPLED = ["--temperature", "0.8", "--top-p", "0.9", "--min-p", "0.05", "--sampling-seed", "3"]


def tokens_line(out: str) -> str:
    (line,) = [line for line in out.splitlines() if line.startswith("tokens: ")]
    return line


@pytest.mark.parametrize("backend", ["numpy", "arena", "mlx"])
def test_sampled_generation_is_checked_against_the_same_sampler_on_numpy(backend, capsys) -> None:
    assert cli.main(["generate", "llama", *SMALL, *SAMPLED, "--backend", backend]) == 0
    out = capsys.readouterr().out
    assert "sampling: temperature 0.8, top-k all, top-p 0.9, min-p 0.05 (seed 3)" in out
    assert out.rstrip().endswith(
        "tokens match the same sampler (seed 3) on the NumPy reference interpreter "
        "(float32 program): yes"
    )
    assert len(tokens_line(out).split()) == 5


def test_sampling_seeds_draw_different_tokens(capsys) -> None:
    lines = set()
    for seed in range(4):
        argv = ["generate", "llama", *SMALL, "--backend", "numpy", "--temperature", "1.5"]
        assert cli.main([*argv, "--tokens", "8", "--sampling-seed", str(seed)]) == 0
        lines.add(tokens_line(capsys.readouterr().out))
    assert len(lines) > 1


class FlushedWrites:
    """A stdout that records what had been written at each flush."""

    def __init__(self) -> None:
        self.text, self.flushed = "", []

    def write(self, text: str) -> int:
        self.text += text
        return len(text)

    def flush(self) -> None:
        self.flushed.append(self.text)


def test_stream_prints_each_token_as_it_is_made(monkeypatch, capsys) -> None:
    argv = ["generate", "llama", *SMALL, *SAMPLED, "--backend", "numpy"]
    assert cli.main(argv) == 0
    line = tokens_line(capsys.readouterr().out)
    stdout = FlushedWrites()
    monkeypatch.setattr("sys.stdout", stdout)
    assert cli.main([*argv, "--stream"]) == 0
    assert tokens_line(stdout.text) == line, "streamed tokens: the same line"
    ids = line.split()[1:]
    prefixes = ["tokens: " + " ".join(ids[: i + 1]) for i in range(len(ids))]
    flushed_lines = [text.rsplit("\n", 1)[-1] for text in stdout.flushed]
    assert all(prefix in flushed_lines for prefix in prefixes), "a flush after every token"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--temperature", "-1"], "RunError: sampling: temperature must be >= 0"),
        (["--temperature", "nan"], "RunError: sampling: temperature must be finite"),
        (["--top-p", "0"], "RunError: sampling: top_p must be in (0, 1]"),
        (["--top-k", "0"], "RunError: sampling: top_k must be an int >= 1 or None"),
        (["--min-p", "1"], "RunError: sampling: min_p must be in [0, 1)"),
        (["--sampling-seed", "-2"], "RunError: sampling: seed must be an int >= 0 but got -2"),
        (["--top-k", "x"], "argument --top-k: invalid int value: 'x'"),
    ],
)
def test_a_sampling_parameter_out_of_range_exits_two_before_compiling(args, message, capsys):
    assert cli.main(["generate", "llama", *SMALL, *args]) == 2
    captured = capsys.readouterr()
    assert captured.out == "", "nothing ran"
    (line,) = captured.err.strip().splitlines()
    assert message in line


def test_a_prompt_cache_is_saved_then_resumed_with_the_same_tokens(tmp_path, capsys) -> None:
    path = tmp_path / "prompt.npz"
    argv = ["generate", "llama", *SMALL, *SAMPLED, "--backend", "arena"]
    assert cli.main([*argv, "--prompt-cache", str(path)]) == 0
    saved = capsys.readouterr().out
    assert f"prompt cache: saved to {path} (5 tokens)" in saved and path.exists()
    assert cli.main([*argv, "--prompt-cache", str(path)]) == 0
    resumed = capsys.readouterr().out
    assert f"prompt cache: resumed from {path} (5 tokens)" in resumed
    assert "prompt: 5 tokens (seed 0), resumed from the prompt cache" in resumed
    assert tokens_line(resumed) == tokens_line(saved)
    assert resumed.rstrip().endswith("(float32 program): yes")  # the whole prompt's tokens


def test_a_prompt_cache_of_other_weights_exits_two(tmp_path, capsys) -> None:
    path = tmp_path / "prompt.npz"
    argv = ["generate", "llama", *SMALL, "--backend", "numpy", "--prompt-cache", str(path)]
    assert cli.main(argv) == 0
    capsys.readouterr()
    assert cli.main([*argv, "--seed", "1"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "LoadError: prompt cache" in line and "was made by another program" in line


def test_a_symbolic_prefill_generates_the_reference_tokens_at_the_prompt_length() -> None:
    result = tensorgraph("generate", "llama", *SMALL, "--prefill", "symbolic")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "entries prefill, decode4, decode8, decode (max_seq 16)" in out  # no bucket entries
    assert "prompt: 5 tokens (seed 0), prefill at its length 5 (symbolic)" in out
    assert "prefill arena at 5 tokens: " in out
    assert out.rstrip().endswith("tokens match the NumPy reference: yes")
    bucketed = tensorgraph("generate", "llama", *SMALL)
    line = next(t for t in out.splitlines() if t.startswith("tokens: "))
    assert line in bucketed.stdout.splitlines()


def test_a_symbolic_prefill_refuses_a_prompt_past_the_cache_before_compiling() -> None:
    args = ["--max-seq", "16", "--prompt-len", "14", "--tokens", "4", "--prefill", "symbolic"]
    result = tensorgraph("generate", "llama", "--buckets", "4,8", *args)
    assert result.returncode == 2
    assert (
        "prompt length 14 + 4 new tokens = 18 is past the cache length max_seq 16" in result.stderr
    )
    assert "compiled" not in result.stdout
