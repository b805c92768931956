"""Greedy and sampled generation from a compiled generation program, and its layout.

`generate` drives any program with the entries `llama_generation` builds
(tensorgraph.models.llama_generation: `prefill{L}` buckets or a symbolic `prefill`, a
`decode` step and its `decode{W}` windows, KV caches as states), as the importers'
`from_torch_generation` builds them too: it picks the smallest bucket that holds the
prompt, prefills, then decodes one token per step (pipelined on MLX for greedy decoding,
models/decode_pipeline.py), streaming each token; `cache_prompt` keeps the state after a
prompt (models/prompt_cache.py). `tensorgraph.models.generation_reference` holds the
independent NumPy loop it is checked against. The builder's names are re-exported here.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence

import numpy as np
from attrs import frozen

import tensorgraph as tg
from tensorgraph.compiler import check_run_arguments
from tensorgraph.errors import RunError
from tensorgraph.models.generation_reference import ReferenceGeneration, reference_generate
from tensorgraph.models.llama_generation import (
    DEFAULT_BUCKETS,
    CacheQuantization,
    cache_quantization,
    decode_graph,
    llama_generation,
    llama_weights,
    prefill_graph,
    quantized_attention,
)
from tensorgraph.models.prompt_cache import PromptCache, program_identity
from tensorgraph.models.sampling import Sampler
from tensorgraph.prefill_modes import PREFILL_MODES
from tensorgraph.runtime.state import check_state

__all__ = [
    "DEFAULT_BUCKETS",
    "PREFILL_MODES",
    "CacheQuantization",
    "GenerationLayout",
    "GenerationMemory",
    "GenerationResult",
    "PromptCache",
    "ReferenceGeneration",
    "Sampler",
    "cache_prompt",
    "cache_quantization",
    "choose_bucket",
    "decode_graph",
    "generate",
    "generation_layout",
    "generation_memory",
    "llama_generation",
    "llama_weights",
    "prefill_graph",
    "quantized_attention",
    "reference_generate",
]


@frozen
class GenerationMemory:
    """Bytes of a generation program: each entry's own activation arena (`entries`), and
    the shared regions: the one activation arena (the largest entry's), the weights
    (stored once) and the state (the KV caches)."""

    entries: Mapping[str, int]
    arena: int
    weights: int
    state: int

    @property
    def total(self) -> int:
        return self.arena + self.weights + self.state


class DecodeRate:
    """The decode figures of a generation result with `tokens` (batch, count), the
    first made before any decode step, and `decode_seconds` of all decode calls."""

    __slots__ = ()
    tokens: np.ndarray
    decode_seconds: float

    @property
    def decode_steps(self) -> int:
        return self.tokens.shape[1] - 1

    @property
    def decode_tokens_per_second(self) -> float:
        """Tokens made by decode steps (all rows) per second; NaN with no decode step."""
        if self.decode_steps == 0:
            return float("nan")
        return self.tokens.shape[0] * self.decode_steps / self.decode_seconds


@frozen
class GenerationResult(DecodeRate):
    """One generation: `tokens` (batch, count) int32 new token ids, the first from the
    prefill; the `bucket` the prompt of `prompt_length` was padded to (0: resumed from a
    prompt cache; the prompt's own length with a symbolic prefill); wall-clock seconds
    of the prefill call and of all decode calls (each including its logits' transfer to
    the host and the sampler's pick); the program's memory; the `state` it ran on."""

    tokens: np.ndarray
    prompt_length: int
    bucket: int
    prefill_seconds: float
    decode_seconds: float
    memory: GenerationMemory
    state: object

    @property
    def prefill_tokens_per_second(self) -> float:
        """Prompt tokens (all rows of the batch) per second of prefill."""
        return self.tokens.shape[0] * self.prompt_length / self.prefill_seconds


@frozen
class GenerationLayout:
    """What a generation program accepts: its prefill `buckets` (ascending), the cache
    length `max_seq`, the `batch`, the `vocab` and its decode `windows` (ascending).
    A program with a symbolic "prefill" entry has no buckets and its prompt length's
    range instead (`prompt_range`, (min, max)): it prefills at the prompt's length."""

    buckets: tuple[int, ...]
    max_seq: int
    batch: int
    vocab: int
    windows: tuple[int, ...] = ()
    prompt_range: tuple[int, int] | None = None

    def prefill_entry(self, bucket: int) -> str:
        """The entry that prefills at `bucket` (from `bucket_for`)."""
        return "prefill" if self.prompt_range is not None else f"prefill{bucket}"

    def decode_entry(self, position: int) -> str:
        """The decode entry for a step at `position`: the smallest window above it, else
        the whole-cache "decode"."""
        fitting = [w for w in self.windows if position < w]
        return f"decode{min(fitting)}" if fitting else "decode"

    def bucket_for(self, prompt_length: int, new_tokens: int) -> int:
        """`choose_bucket` for this program's buckets and max_seq; with a symbolic prefill,
        the prompt's own length, after the same checks (RunError naming the prompt's
        length and the entry's range when it lies outside)."""
        if self.prompt_range is None:
            return choose_bucket(self.buckets, self.max_seq, prompt_length, new_tokens)
        low, high = self.prompt_range
        if prompt_length >= 1 and not low <= prompt_length <= high:
            raise RunError(
                f"prompt length {prompt_length} is outside the symbolic prefill's range "
                f"[{low}, {high}] (dim 'prompt' of entry 'prefill')"
            )
        return choose_bucket((max(prompt_length, 1),), self.max_seq, prompt_length, new_tokens)


def choose_bucket(buckets: Sequence[int], max_seq: int, prompt_length: int, new_tokens: int) -> int:
    """The smallest of `buckets` >= prompt_length. RunError, naming both numbers, when the
    prompt is empty or longer than the largest bucket, when new_tokens < 1, or when
    prompt_length + new_tokens is past max_seq."""
    largest = max(buckets)
    if prompt_length < 1:
        raise RunError(f"the prompt is empty (length {prompt_length}); it needs >= 1 token")
    if new_tokens < 1:
        raise RunError(f"tokens {new_tokens}: generation makes at least 1 new token")
    if prompt_length > largest:
        raise RunError(
            f"prompt length {prompt_length} is longer than the largest prefill bucket "
            f"{largest} (buckets {sorted(buckets)})"
        )
    if prompt_length + new_tokens > max_seq:
        raise RunError(
            f"prompt length {prompt_length} + {new_tokens} new tokens = "
            f"{prompt_length + new_tokens} is past the cache length max_seq {max_seq}"
        )
    return min(b for b in buckets if b >= prompt_length)


def generation_layout(program: object) -> GenerationLayout:
    """The layout of a program compiled from `llama_generation`'s entries (or any with the
    same entry names and inputs named as in INPUT_ROLES, whose first 4-D state is a
    (batch, heads, max_seq, head_dim) cache, or a quantized cache's codes (batch, heads,
    max_seq, packed)). RunError when an entry is missing."""
    entries = program.entries
    buckets = sorted(
        int(n[len("prefill") :]) for n in entries if n.startswith("prefill") and n != "prefill"
    )
    windows = sorted(
        int(n[len("decode") :]) for n in entries if n.startswith("decode") and n != "decode"
    )
    prompt_range = _prompt_range(entries["prefill"]) if "prefill" in entries else None
    if "decode" not in entries or not (buckets or prompt_range):
        raise RunError(
            f"a generation program needs 'decode' and 'prefill<L>' (or a symbolic 'prefill') "
            f"entries but has {sorted(entries)}"
        )
    if prompt_range is not None:
        buckets = []  # the symbolic entry serves every length: no padding to a bucket
    decode = entries["decode"].graph
    token = next(n for n in decode.inputs if INPUT_ROLES.get(n.name) == "ids")
    logits = decode.node(decode.returned[0])
    # a ring (from_torch_generation's `key_ring_{i}`: a sliding window) bounds no position
    caches = [n.shape[2] for n in decode.states if len(n.shape) == 4 and "_ring_" not in n.name]
    max_seq = caches[0] if caches else sys.maxsize
    return GenerationLayout(
        tuple(buckets), max_seq, token.shape[0], logits.shape[-1], tuple(windows), prompt_range
    )


def _prompt_range(entry: object) -> tuple[int, int]:
    """(min, max) of the symbolic prefill entry's one dim, the prompt's length (RunError
    when the entry has no dim or several)."""
    dims = list(entry.graph.dims.values())
    if len(dims) != 1:
        raise RunError(
            f"entry 'prefill' must have one symbolic dim, the prompt's length, but has "
            f"{[d.describe() for d in dims]}"
        )
    return dims[0].min, dims[0].max


# What each entry input is, by name: the zoo entries' names and those of
# `tensorgraph.importers.generation.from_torch_generation` (int64 ids and positions).
INPUT_ROLES = {
    "tokens": "ids",
    "token": "ids",
    "input_ids": "ids",
    "pos": "position",
    "position": "position",
    "length": "length",
}


def _feeds(
    graph: tg.Graph, values: Mapping[str, object], roles: list | None = None
) -> dict[str, np.ndarray]:
    """Each input of the entry `graph` fed its role's value, in the input's dtype (a
    copy: the caller may change its arrays later); `roles`: `input_roles(graph)`, when the
    caller keeps it."""
    roles = input_roles(graph) if roles is None else roles
    return {name: np.array(values[role], dtype, order="C") for name, role, dtype in roles}


def input_roles(graph: tg.Graph) -> list[tuple[str, str, np.dtype]]:
    """(input name, its role, its NumPy dtype) for every input of entry `graph`: what
    `_feeds` feeds, read once per step. RunError naming an input of no role."""
    roles = []
    for node in graph.inputs:
        role = INPUT_ROLES.get(node.name)
        if role is None:
            raise RunError(
                f"entry {graph.name!r}: input {node.name!r} is none of the generation inputs "
                f"{sorted(INPUT_ROLES)}"
            )
        roles.append((node.name, role, node.dtype.to_numpy()))
    return roles


def generation_memory(program: object) -> GenerationMemory:
    """The program's memory by entry and in total (see GenerationMemory)."""
    arenas = {name: entry.plan.arena_size for name, entry in program.entries.items()}
    return GenerationMemory(arenas, program.arena_size, program.constant_size, program.state_size)


def _prompt(prompt: object, batch: int) -> np.ndarray:
    """The prompt as (batch, n) int32: a 1-D sequence is one row, repeated for the batch."""
    array = np.asarray(prompt)
    if array.ndim == 1:
        array = np.broadcast_to(array, (batch, array.shape[0]))
    if array.ndim != 2 or array.shape[0] != batch:
        raise RunError(f"prompt of shape {array.shape}: expected (n,) or ({batch}, n) token ids")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise RunError(f"prompt token ids must be integers but got dtype {array.dtype}")
    return np.ascontiguousarray(array, dtype=np.int32)


def generate(
    program: object,
    prompt: object,
    tokens: int,
    *,
    backend: str = "mlx",
    state: object = None,
    sampler: Sampler | None = None,
    on_token: Callable[[np.ndarray], object] | None = None,
    prompt_cache: PromptCache | None = None,
    **backend_options: object,
) -> GenerationResult:
    """Generation of `tokens` new token ids after `prompt` ((n,) or (batch, n) ids) with a
    program compiled from `llama_generation`'s entries (or from_torch_generation's:
    inputs are fed by name, see INPUT_ROLES): the prompt, padded with id 0, runs the
    smallest prefill bucket >= n at position 0 (a symbolic "prefill" entry runs it
    unpadded, at its length n), then `tokens - 1` decode steps at
    positions n, n + 1, ... each feed the previous token (each on the smallest decode
    window above its position, see GenerationLayout.decode_entry). `state` (default: a fresh
    `program.new_state(backend)`) holds the KV caches; options go to the backend.

    Each token is picked from its logits by `sampler` (default: greedy, the argmax; see
    `tensorgraph.models.sampling`: its draws restart at its seed on every call, so a seed
    gives the same tokens on every backend that computes the same logits), and handed to
    `on_token` as a (batch,) int32 array as soon as it is picked, before the next step.
    Greedy decoding on MLX is pipelined (`decode_pipeline.decode_greedy`: the argmax on
    the device, step t + 1 queued before token t is read): the same tokens, each handed
    to `on_token` once the next step is queued.

    With `prompt_cache` (from `cache_prompt` or `load_prompt_cache`, made by a program of
    the same identity), the prompt must start with the cache's prompt: the cached states
    are written into `state`, any further prompt tokens run as decode steps at their
    positions, and the first token is picked from the cache's (or the last such step's)
    logits; `bucket` is then 0 (no prefill ran). On the cache's own prompt this gives
    exactly the tokens of a run over the whole prompt.

    Bad lengths (see GenerationLayout.bucket_for: with a prompt cache, only the empty
    prompt, tokens < 1 and prompt + tokens past max_seq), a prompt cache of another
    program or prompt, and an out-of-range sampler (RunError when the Sampler is made)
    raise RunError before any call, so the state is untouched."""
    layout = generation_layout(program)
    ids = _prompt(prompt, layout.batch)
    length = ids.shape[1]
    sampler = Sampler() if sampler is None else sampler
    if not isinstance(sampler, Sampler):
        raise RunError(f"sampler must be a Sampler but got {type(sampler).__name__}")
    if prompt_cache is None:
        bucket = layout.bucket_for(length, tokens)
    else:
        bucket = 0
        _check_prompt_cache(program, prompt_cache, ids)
        choose_bucket((length,), layout.max_seq, length, tokens)
    state = program.new_state(backend) if state is None else state
    draws = sampler.generator()
    out = np.empty((layout.batch, tokens), np.int32)

    entry_roles: dict[str, list] = {}  # entry -> its input_roles, read once per generate

    def call(entry: str, ids: np.ndarray, position: int) -> np.ndarray:
        graph = program.entries[entry].graph
        if entry not in entry_roles:
            entry_roles[entry] = input_roles(graph)
        roles = {"ids": ids, "position": position, "length": length}
        feeds = _feeds(graph, roles, entry_roles[entry])
        (logits,) = program.run(entry, feeds, backend=backend, state=state, **backend_options)
        return np.asarray(logits).reshape(layout.batch, -1)

    def pick(step: int, logits: np.ndarray) -> None:
        out[:, step] = sampler.sample(logits, draws)
        if on_token is not None:
            on_token(out[:, step].copy())

    began = time.perf_counter()
    if prompt_cache is None:
        padded = np.zeros((layout.batch, bucket), np.int32)
        padded[:, :length] = ids
        logits = call(layout.prefill_entry(bucket), padded, 0)
    else:
        region = (program.state_layout, program.state_size)
        for entry in program.entries.values():  # before a value is written, not in run
            check_state(state, backend, entry.graph, None, region)
        state.assign(prompt_cache.states)
        logits = prompt_cache.logits
        for position in range(prompt_cache.length, length):
            logits = call(layout.decode_entry(position), ids[:, position : position + 1], position)
    pick(0, logits)
    prefill_seconds = time.perf_counter() - began
    began = time.perf_counter()
    positions = range(length, length + tokens - 1)
    if pipelines_greedy(program, backend, sampler, backend_options):
        from tensorgraph.models.decode_pipeline import decode_greedy

        def roles(entry: str) -> list:
            if entry not in entry_roles:
                entry_roles[entry] = input_roles(program.entries[entry].graph)
            return entry_roles[entry]

        def emit(step: int, token: np.ndarray) -> None:
            out[:, step] = token
            if on_token is not None:
                on_token(token.copy())

        decode_greedy(
            program, layout.decode_entry, roles, out[:, 0], positions, layout.vocab, state,
            backend_options, emit,
        )  # fmt: skip
    else:
        for step, position in enumerate(positions, start=1):
            pick(step, call(layout.decode_entry(position), out[:, step - 1 : step], position))
    decode_seconds = time.perf_counter() - began
    return GenerationResult(
        out, length, bucket, prefill_seconds, decode_seconds, generation_memory(program), state
    )


def pipelines_greedy(
    program: object, backend: str, sampler: Sampler, options: Mapping[str, object]
) -> bool:
    """Whether `generate` decodes through `decode_pipeline.decode_greedy`: greedy picks
    on MLX (the argmax stays on the device) with static decode entries, their run
    `options` valid (checked here, as `Program.run` checks them, since the pipelined
    steps call the entries directly). Sampling draws on the host (sampling.py: the same
    draws on every backend), so it keeps the synchronous loop."""
    if backend != "mlx" or not sampler.is_greedy:
        return False
    decodes = [e for name, e in program.entries.items() if name.startswith("decode")]
    if any(e.graph.dims for e in decodes):
        return False
    check_run_arguments(decodes[0].graph, {}, None, backend, options)
    return not options.get("stats")  # a run measured alone waits for its outputs anyway


def _check_prompt_cache(program: object, cache: PromptCache, ids: np.ndarray) -> None:
    """RunError unless `cache` is a PromptCache of `program` whose prompt begins `ids`."""
    if not isinstance(cache, PromptCache):
        raise RunError(f"prompt_cache must be a PromptCache but got {type(cache).__name__}")
    cache.check_program(program)
    cached = cache.prompt
    if cached.shape[0] != ids.shape[0] or cached.shape[1] > ids.shape[1]:
        raise RunError(
            f"the prompt {ids.shape} is not an extension of the cached prompt {cached.shape}"
        )
    if not np.array_equal(ids[:, : cached.shape[1]], cached):
        step = int(np.argmax((ids[:, : cached.shape[1]] != cached).any(axis=0)))
        raise RunError(f"the prompt differs from the cached prompt at position {step}")


def cache_prompt(
    program: object, prompt: object, *, backend: str = "mlx", state: object = None
) -> PromptCache:
    """Run the prompt ((n,) or (batch, n) ids) through the smallest prefill bucket >= n
    (or the symbolic prefill at n), as `generate` does, on `state` (default: a fresh
    one), and return its PromptCache: the states after it, the logits of its last
    position and the program's identity. RunError (nothing run) for a prompt no bucket
    (or the symbolic prefill's range) holds, or past max_seq - 1."""
    ids = _prompt(prompt, generation_layout(program).batch)
    state = program.new_state(backend) if state is None else state
    logits = prefill_logits(program, ids, backend, state).astype(np.float32)
    values = {name: state[name] for name in state.names}
    return PromptCache(program_identity(program), ids, logits, values)


def prefill_logits(
    program: object, prompt: object, backend: str = "mlx", state: object = None
) -> np.ndarray:
    """The logits (batch, vocab) of the first new token after `prompt`, from the
    prefill entry `generate` would run, on `state` (default: a fresh one, then
    discarded): what to compare between backends where greedy tokens may flip on a
    near tie (reduced precision), and what a prompt cache keeps. RunError (nothing run)
    for a prompt no bucket holds or past max_seq - 1."""
    layout = generation_layout(program)
    ids = _prompt(prompt, layout.batch)
    bucket = layout.bucket_for(ids.shape[1], 1)
    padded = np.zeros((layout.batch, bucket), np.int32)
    padded[:, : ids.shape[1]] = ids
    entry = layout.prefill_entry(bucket)
    roles = {"ids": padded, "position": 0, "length": ids.shape[1]}
    feeds = _feeds(program.entries[entry].graph, roles)
    state = program.new_state(backend) if state is None else state
    (logits,) = program.run(entry, feeds, backend=backend, state=state)
    return np.asarray(logits).reshape(layout.batch, -1)
