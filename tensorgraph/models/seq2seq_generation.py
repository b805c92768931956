"""Generation with an encoder-decoder program (the "encode" and "decode" entries of
`tensorgraph.importers.seq2seq_generation.from_torch_seq2seq_generation`, compiled as
one MultiProgram): the encoder runs once per source, then one decode step per token.

`generate_seq2seq(program, source, tokens, rules=...)` makes exactly `tokens` new ids:

1. the decoder prompt `rules.start` (decoder_start_token_id, then any forced ids):
   encode runs the source with start[0] at position 0, each further start id runs a
   decode step at its position; the last of these gives the first new token's logits;
2. new token k (0-based) is picked from its logits after `rules.apply(logits, k,
   tokens)` (the host-side logits processing of the model's generation config, see
   DecodingRules) by the sampler (greedy by default), and fed to the decode step at
   position len(start) + k, whose logits give token k + 1.

So greedy tokens are those of transformers' `model.generate(source, do_sample=False,
max_new_tokens=tokens, min_new_tokens=tokens)` with the same generation config: its
logits processors that such a call applies are the ones DecodingRules mirrors, and any
other setting it would apply is refused when the rules are made (GraphError), never
silently skipped.

Greedy decoding on MLX is pipelined after the first new token (decode_pipeline.py, as
`generate` does): each step's pick is the device's argmax of its logits under the
step's rules (`DecodingRules.mask`: banned ids set to -inf on the device, a forced id
known on the host), fed lazily to the next step, which is queued before the token is
read; the same tokens as the synchronous loop (which a drawing sampler, another backend
or `stats=True` keeps), each handed to `on_token` once the next step is queued. The
first new token is picked on the host from the decoder prompt's logits (one read per
source). There is no early stop (EOS is banned until a forced EOS ends the run), so no
step is queued past the last token and the state is the synchronous loop's.

Every check on the source, the lengths and the sampler happens before the first call,
so bad input (RunError) leaves the state as it was.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np
from attrs import field, frozen

from tensorgraph.errors import GraphError, RunError
from tensorgraph.models.generation import (
    DecodeRate,
    GenerationMemory,
    generation_memory,
    input_roles,
    pipelines_greedy,
)
from tensorgraph.models.sampling import Sampler

__all__ = [
    "DecodingRules",
    "Seq2SeqLayout",
    "Seq2SeqResult",
    "audio_features",
    "decoding_rules",
    "generate_seq2seq",
    "seq2seq_layout",
]


def _ids(value: object) -> tuple[int, ...]:
    """None, an int or a sequence of ints as a tuple of ints."""
    if value is None:
        return ()
    if isinstance(value, int | np.integer):
        return (int(value),)
    return tuple(int(v) for v in value)


@frozen
class DecodingRules:
    """Host-side logits processing of a generation config, as transformers' logits
    processors apply it in a greedy generate of exactly N new tokens (min_new_tokens =
    max_new_tokens = N), in their order: `bad` ids banned (one-token bad_words_ids other
    than an EOS id); `eos` ids banned (min_new_tokens); `forced_bos` forced as the token
    at length 1 (the first new token after a one-token `start`), `forced_eos` as the
    token at max_length - 1 (the last); then `suppress` ids banned (suppress_tokens) and
    `begin_suppress` ids banned at new token `begin_index`. Forcing bans every other id;
    a ban after it can still take the forced one (transformers refuses a forced id that
    suppress_tokens holds, as `decoding_rules` does). Ids past the vocabulary are
    ignored, as torch.isin ignores them. `start` is the decoder prompt."""

    start: tuple[int, ...] = field(converter=tuple)
    suppress: tuple[int, ...] = field(default=(), converter=tuple)
    bad: tuple[int, ...] = field(default=(), converter=tuple)
    begin_suppress: tuple[int, ...] = field(default=(), converter=tuple)
    eos: tuple[int, ...] = field(default=(), converter=tuple)
    forced_bos: int | None = None
    forced_eos: int | None = None

    @property
    def begin_index(self) -> int:
        """The new token begin_suppress applies to: the first, or the second when a
        forced BOS takes the first after a one-token start (transformers' rule)."""
        return 1 if self.forced_bos is not None and len(self.start) == 1 else 0

    def mask(self, step: int, count: int, vocab: int) -> tuple[np.ndarray | None, bool]:
        """What the rules do to new token `step` of `count` over `vocab` ids, as
        (keep, forced) (decode_pipeline.Rule): `keep` the ids that may be picked (None:
        every id), `forced` whether a forced id replaced the logits (then `keep` holds
        at most that id: a later ban can still take it)."""
        keep = np.ones(vocab, bool)

        def ban(ids: Sequence[int]) -> None:
            keep[[i for i in ids if 0 <= i < vocab]] = False

        ban([i for i in self.bad if i not in self.eos])
        ban(self.eos)  # min_new_tokens = count: no EOS unless forced
        forced = None
        if step == 0 and len(self.start) == 1:
            forced = self.forced_bos if _in_range(self.forced_bos, vocab) else forced
        if step == count - 1:
            forced = self.forced_eos if _in_range(self.forced_eos, vocab) else forced
        if forced is not None:  # forcing bans every other id, whatever was banned before
            keep[:] = False
            keep[forced] = True
        ban(self.suppress)
        if step == self.begin_index:
            ban(self.begin_suppress)
        return (None if forced is None and keep.all() else keep), forced is not None

    def masks(self, count: int, vocab: int) -> Callable[[int], tuple[np.ndarray | None, bool]]:
        """`mask(step, count, vocab)` as a function of the step, each distinct rule made
        once (and then the same arrays): the rules differ only at the first and last
        new tokens and at begin_index, so every other step shares one."""
        made: dict[int, tuple[np.ndarray | None, bool]] = {}
        special = {0, self.begin_index, count - 1}

        def rule(step: int) -> tuple[np.ndarray | None, bool]:
            key = step if step in special else -1
            if key not in made:
                made[key] = self.mask(step, count, vocab)
            return made[key]

        return rule

    def apply(self, logits: np.ndarray, step: int, count: int) -> np.ndarray:
        """`logits` (batch, vocab) of new token `step` of `count`, processed (a float64
        copy; -inf marks a token that cannot be picked; a forced id's logit is 0)."""
        out = np.array(logits, np.float64)
        keep, forced = self.mask(step, count, out.shape[-1])
        if forced:
            out[:] = 0.0
        if keep is not None:
            out[:, ~keep] = -np.inf
        return out


def _in_range(token: int | None, vocab: int) -> bool:
    """Whether a forced id names a token (transformers' force ignores one past vocab)."""
    return token is not None and 0 <= token < vocab


# Generation-config fields whose non-default value changes a greedy generate in a way
# DecodingRules does not mirror: refused rather than ignored.
UNMIRRORED = {
    "no_repeat_ngram_size": 0,
    "encoder_no_repeat_ngram_size": 0,
    "repetition_penalty": 1.0,
    "encoder_repetition_penalty": 1.0,
    "sequence_bias": None,
    "exponential_decay_length_penalty": None,
    "num_beams": 1,
}


# Whisper generation-config fields from which transformers' Whisper generate makes its
# decoder prompt (language, task, no-timestamps ids): the caller must spell the prompt.
WHISPER_PROMPT = ("lang_to_id", "task_to_id", "language", "task", "no_timestamps_token_id")


def decoding_rules(generation_config: object, forced_ids: Sequence[int] = ()) -> DecodingRules:
    """The DecodingRules of a transformers GenerationConfig (read by attribute: any
    object with those fields): start = decoder_start_token_id (else bos_token_id), the
    config's forced_decoder_ids (positions 1, 2, ... in order), then `forced_ids`. A
    Whisper checkpoint's language and task tokens are the caller's to give as
    `forced_ids` (transformers' Whisper generate detects a missing language with a
    model call of its own, which this does not mirror). GraphError naming the field for
    a missing start token, forced ids that are not a run from position 1, a bad word of
    several tokens, timestamps, or a setting DecodingRules does not mirror
    (UNMIRRORED)."""

    def get(name: str) -> object:
        return getattr(generation_config, name, None)

    start = _ids(get("decoder_start_token_id")) or _ids(get("bos_token_id"))
    if len(start) != 1:
        raise GraphError(
            f"decoding rules: decoder_start_token_id {get('decoder_start_token_id')!r} "
            f"(bos_token_id {get('bos_token_id')!r}) names no single start token"
        )
    forced = sorted((int(i), t) for i, t in get("forced_decoder_ids") or ())
    if [i for i, _ in forced] != list(range(1, len(forced) + 1)) or any(
        not isinstance(t, int) for _, t in forced
    ):
        raise GraphError(
            f"decoding rules: forced_decoder_ids {get('forced_decoder_ids')!r} must force "
            "token ids at positions 1, 2, ... (they then follow the start token)"
        )
    problems = []
    whisper = [name for name in WHISPER_PROMPT if get(name) is not None]
    if whisper and not forced_ids:
        problems.append(
            f"{', '.join(whisper)} (transformers' Whisper generate builds its decoder prompt "
            "from them, detecting the language with a model call: give the prompt's "
            "language, task and no-timestamps ids as forced_ids)"
        )
    if get("return_timestamps"):
        problems.append("return_timestamps=True")
    for name, default in UNMIRRORED.items():
        value = get(name)
        if value is not None and value != default:
            problems.append(f"{name}={value!r}")
    bad = [tuple(words) for words in get("bad_words_ids") or ()]
    if any(len(words) != 1 for words in bad):
        problems.append(f"bad_words_ids={get('bad_words_ids')!r} (only one-token bad words)")
    suppressed = set(_ids(get("suppress_tokens")))
    for name in ("forced_bos_token_id", "forced_eos_token_id"):
        if get(name) is not None and set(_ids(get(name))) <= suppressed:
            problems.append(f"{name}={get(name)!r} is also in suppress_tokens")
    if problems:
        raise GraphError(
            "decoding rules: the generation config sets what host-side decoding does not "
            "mirror: " + ", ".join(problems)
        )
    return DecodingRules(
        start=start + tuple(t for _, t in forced) + _ids(forced_ids),
        suppress=_ids(get("suppress_tokens")),
        bad=tuple(w[0] for w in bad),
        begin_suppress=_ids(get("begin_suppress_tokens")),
        eos=_ids(get("eos_token_id")),
        forced_bos=get("forced_bos_token_id"),
        forced_eos=get("forced_eos_token_id"),
    )


@frozen
class Seq2SeqLayout:
    """What an encode/decode program accepts: the `source` input's name ("input_features"
    or "source_ids") and `source_shape`, the `batch`, the self-attention cache length
    `max_seq` and the `vocab`."""

    source: str
    source_shape: tuple[int, ...]
    batch: int
    max_seq: int
    vocab: int

    @property
    def is_speech(self) -> bool:
        return self.source == "input_features"


def seq2seq_layout(program: object) -> Seq2SeqLayout:
    """The layout of a program compiled from from_torch_seq2seq_generation's entries
    (RunError when "encode" or "decode" is missing)."""
    entries = getattr(program, "entries", {})
    if "encode" not in entries or "decode" not in entries:
        raise RunError(
            f"an encoder-decoder program needs 'encode' and 'decode' entries but has "
            f"{sorted(entries)}"
        )
    encode, decode = entries["encode"].graph, entries["decode"].graph
    source = next(n for n in encode.inputs if n.name in ("input_features", "source_ids"))
    ids = next(n for n in decode.inputs if n.name == "input_ids")
    logits = decode.node(decode.returned[0])
    max_seq = next(n.shape[2] for n in decode.states if n.name.startswith("self_key_"))
    return Seq2SeqLayout(source.name, source.shape, ids.shape[0], max_seq, logits.shape[-1])


@frozen
class Seq2SeqResult(DecodeRate):
    """One generation: `tokens` (batch, count) int32 new ids (the decoder prompt not
    included); wall-clock seconds of the encode call (with the rest of the decoder
    prompt) and of the decode calls for new tokens (each with its logits' transfer and
    pick); the program's memory; the `state` it ran on."""

    tokens: np.ndarray
    encode_seconds: float
    decode_seconds: float
    memory: GenerationMemory
    state: object


def _source_feeds(layout: Seq2SeqLayout, source: object) -> dict[str, np.ndarray]:
    """The encode entry's source feeds (RunError naming the input on a bad source)."""
    array = np.asarray(source)
    if layout.is_speech:
        if array.ndim == len(layout.source_shape) - 1:
            array = np.broadcast_to(array, (layout.batch, *array.shape))
        if array.shape != layout.source_shape or not np.issubdtype(array.dtype, np.floating):
            raise RunError(
                f"input_features: expected float log-mel features {layout.source_shape} (or "
                f"{layout.source_shape[1:]}) but got {array.dtype} {array.shape}"
            )
        return {"input_features": np.ascontiguousarray(array, np.float32)}
    if array.ndim == 1:
        array = np.broadcast_to(array, (layout.batch, array.shape[0]))
    if (
        array.ndim != 2
        or array.shape[0] != layout.batch
        or not np.issubdtype(array.dtype, np.integer)
    ):
        raise RunError(
            f"source_ids: expected integer token ids (n,) or ({layout.batch}, n) but got "
            f"{array.dtype} {array.shape}"
        )
    length, rows = array.shape[1], layout.source_shape[1]
    if not 1 <= length <= rows:
        raise RunError(
            f"source_ids: the source has {length} tokens; the encode entry holds 1 to {rows} "
            f"(its source_len)"
        )
    padded = np.zeros(layout.source_shape, np.int64)
    padded[:, :length] = array
    return {"source_ids": padded, "source_length": np.array(length, np.int64)}


def generate_seq2seq(
    program: object,
    source: object,
    tokens: int,
    *,
    rules: DecodingRules,
    backend: str = "mlx",
    state: object = None,
    sampler: Sampler | None = None,
    on_token: Callable[[np.ndarray], object] | None = None,
    **backend_options: object,
) -> Seq2SeqResult:
    """`tokens` new ids after encoding `source` (see the module docstring): for a speech
    program its log-mel features ((n_mels, frames) or (batch, n_mels, frames), e.g. from
    `audio_features`), for a text program its token ids ((n,) or (batch, n), n at most the
    encode entry's source_len). `state` (default: a fresh `program.new_state(backend)`)
    holds the caches; each encode overwrites what a source leaves in it, so one state
    serves any number of sources. Each token is handed to `on_token` ((batch,) int32),
    in order, as soon as it is picked (pipelined: once the next step is queued).
    RunError, before any call: a source of the wrong shape, dtype or length, tokens <
    1, or len(rules.start) + tokens past max_seq (the last new token is never fed back,
    so it needs no cache row)."""
    layout = seq2seq_layout(program)
    feeds = _source_feeds(layout, source)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise RunError(f"tokens {tokens!r}: generation makes at least 1 new token")
    start = len(rules.start)
    if start + tokens - 1 > layout.max_seq:
        raise RunError(
            f"{start} decoder start tokens + {tokens} new tokens need {start + tokens - 1} "
            f"cache rows, past the cache length max_seq {layout.max_seq}"
        )
    sampler = Sampler() if sampler is None else sampler
    if not isinstance(sampler, Sampler):
        raise RunError(f"sampler must be a Sampler but got {type(sampler).__name__}")
    state = program.new_state(backend) if state is None else state
    draws = sampler.generator()
    out = np.empty((layout.batch, tokens), np.int32)

    def run(entry: str, ids: object, extra: dict[str, np.ndarray]) -> np.ndarray:
        ids = np.broadcast_to(np.asarray(ids, np.int64).reshape(-1, 1), (layout.batch, 1))
        inputs = {"input_ids": np.ascontiguousarray(ids), **extra}
        (logits,) = program.run(entry, inputs, backend=backend, state=state, **backend_options)
        return np.asarray(logits).reshape(layout.batch, -1)

    def pick(step: int, logits: np.ndarray) -> None:
        out[:, step] = sampler.sample(rules.apply(logits, step, tokens), draws)
        if on_token is not None:
            on_token(out[:, step].copy())

    began = time.perf_counter()
    logits = run("encode", rules.start[0], feeds)
    for position in range(1, start):
        logits = run("decode", rules.start[position], {"position": np.array(position, np.int64)})
    pick(0, logits)
    encode_seconds = time.perf_counter() - began
    began = time.perf_counter()
    if pipelines_greedy(program, backend, sampler, backend_options):
        from tensorgraph.models.decode_pipeline import decode_greedy

        roles = input_roles(program.entries["decode"].graph)

        def emit(step: int, token: np.ndarray) -> None:
            out[:, step] = token
            if on_token is not None:
                on_token(token.copy())

        decode_greedy(
            program, lambda position: "decode", lambda entry: roles, out[:, 0],
            range(start, start + tokens - 1), layout.vocab, state, backend_options, emit,
            rules.masks(tokens, layout.vocab),
        )  # fmt: skip
    else:
        for step in range(1, tokens):
            position = np.array(start + step - 1, np.int64)
            pick(step, run("decode", out[:, step - 1], {"position": position}))
    decode_seconds = time.perf_counter() - began
    return Seq2SeqResult(out, encode_seconds, decode_seconds, generation_memory(program), state)


def audio_features(extractor: object, audio: object, sampling_rate: int) -> np.ndarray:
    """The log-mel features (1, n_mels, frames) float32 of a mono waveform through a
    transformers feature extractor (WhisperFeatureExtractor: it pads to its window of
    `extractor.n_samples` samples). RunError, before anything runs, for a sampling rate
    other than the extractor's, or audio that is not a non-empty 1-D float array of at
    most n_samples (the extractor would cut a longer one silently)."""
    expected = int(extractor.sampling_rate)
    if isinstance(sampling_rate, bool) or sampling_rate != expected:
        raise RunError(
            f"audio: sampling rate {sampling_rate!r} Hz, but the feature extractor takes "
            f"{expected} Hz (resample first)"
        )
    wave = np.asarray(audio)
    window = int(extractor.n_samples)
    if wave.ndim != 1 or not np.issubdtype(wave.dtype, np.floating):
        raise RunError(f"audio: expected a 1-D float waveform but got {wave.dtype} {wave.shape}")
    if not 1 <= wave.shape[0] <= window:
        raise RunError(
            f"audio: {wave.shape[0]} samples ({wave.shape[0] / expected:g} s); the encoder's "
            f"window holds 1 to {window} ({window / expected:g} s at {expected} Hz)"
        )
    if not np.all(np.isfinite(wave)):
        raise RunError("audio: the waveform holds NaN or infinite samples")
    batch = extractor(wave.astype(np.float32), sampling_rate=expected, return_tensors="np")
    return np.ascontiguousarray(batch["input_features"], np.float32)
