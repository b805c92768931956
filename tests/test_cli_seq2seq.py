"""`tensorgraph generate hf:<model_type>` for encoder-decoder families: Whisper on a
synthetic waveform through its own feature extractor, T5 on seeded source ids; each
runs end to end through `python -m tensorgraph.cli`, prints tokens, rates and memory,
and checks its tokens against transformers' generate. Options the path does not take
exit 2 naming them, before anything is built."""

import pytest

from tensorgraph import cli
from tests.test_cli import tensorgraph

pytest.importorskip("transformers", reason="the models extra is not installed")

SMALL = ["--max-seq", "16", "--tokens", "6", "--prompt-len", "7", "--buckets", "8"]


def tokens_line(out: str) -> list[int]:
    (line,) = [line for line in out.splitlines() if line.startswith("tokens:")]
    return [int(t) for t in line.split()[1:]]


def test_whisper_generates_from_synthetic_audio_as_transformers_does() -> None:
    result = tensorgraph("generate", "hf:whisper", *SMALL, "--backend", "arena", "--stream")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "hf:whisper: entries encode, decode (max_seq 16)" in out
    # 1 s window (100 frames a second, 80 mel bins), 0.75 s of audio at 16 kHz
    assert "source: 0.75 s synthetic audio at 16000 Hz, features (1, 80, 100)" in out
    ids = tokens_line(out)
    assert len(ids) == 6 and all(0 <= t < 128 for t in ids)
    assert "encode: " in out and "(5 steps" in out and "memory per entry (arena): encode " in out
    assert "state region" in out
    assert out.rstrip().endswith("tokens match transformers generate: yes")


def test_t5_generates_from_source_ids_as_transformers_does() -> None:
    result = tensorgraph("generate", "hf:t5", *SMALL, "--backend", "mlx")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "source: 7 source tokens (seed 0), source_len 8" in out  # smallest bucket >= 7
    assert len(tokens_line(out)) == 6
    assert out.rstrip().endswith("tokens match transformers generate: yes")


@pytest.mark.slow  # about 10 s of export; sampling is covered in CI by the importer tests
def test_sampling_is_checked_against_the_reference_interpreter() -> None:
    args = ["generate", "hf:t5", *SMALL, "--backend", "arena", "--temperature", "1.0"]
    result = tensorgraph(*args, "--sampling-seed", "3")
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip().endswith(
        "tokens match the same sampler (seed 3) on the NumPy reference interpreter: yes"
    )


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--kv-bits", "8"], "hf:t5 is an encoder-decoder model: --kv-bits not supported"),
        (["--dtype", "bfloat16"], "hf:t5 is an encoder-decoder model: --dtype not supported"),
        (["--prompt-len", "9"], "--prompt-len 9 is longer than the largest source bucket 8"),
        (["--tokens", "17"], "1 start token + --tokens 17 is past --max-seq 16"),
    ],
)
def test_bad_options_exit_two_naming_them(capsys, extra, message) -> None:
    assert cli.main(["generate", "hf:t5", *SMALL, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


@pytest.mark.slow  # about 10 s of export each
@pytest.mark.parametrize(
    "family",
    [
        "bart",
        "marian",
        "mbart",
        "pegasus",
        "m2m_100",
        "blenderbot-small",
        "mt5",
        "umt5",
        "switch_transformers",
    ],
)
def test_other_text_families_generate_transformers_tokens(family: str) -> None:
    """The same path, no per-family code: learned, sinusoidal and relative positions,
    pre- and post-norm layers, forced EOS, top-1 routed experts (Switch Transformers'
    sparse layers, exported under the importer's stand-ins)."""
    result = tensorgraph("generate", f"hf:{family}", *SMALL, "--backend", "numpy")
    assert result.returncode == 0, result.stderr
    assert result.stdout.rstrip().endswith("tokens match transformers generate: yes")
