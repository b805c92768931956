"""Prompt caches: the state of a generation program after a prompt, kept in memory or in
a file, so that `generate` resumes from it instead of running the prompt again (what
mlx-lm's `cache_prompt` and `--prompt-cache-file` do).

A `PromptCache` holds the `prompt` ((batch, n) int32 ids) it was made from, the logits
(batch, vocab) of its last position (the first new token is drawn from them), the value
of every state of the program after the prompt (host arrays by name) and the program's
`identity`: a SHA-256 over the state layout (each state's name, shape, dtype and offset,
the region's size) and every bound weight (name, dtype, shape and bytes). A cache is
only ever applied to a program of the same identity: from another program (other
weights, another cache length) it is a LoadError when read from a file and a RunError
when handed to `generate`, raised before any state is written.

File format (`save_prompt_cache`): one uncompressed `.npz` (np.savez, read back with
allow_pickle=False) holding `identity` and `meta` (JSON: format version, prompt shape,
state names) as strings, `prompt`, `logits` (float32: any float logits widen to it
exactly) and one raw-byte array `state:<name>` per state, reshaped on load from the
program's own state specs, so every state dtype (uint32 codes, bfloat16) round-trips.
"""

from __future__ import annotations

import hashlib
import json
import os
import weakref
import zipfile
from collections.abc import Mapping

import numpy as np
from attrs import field, frozen

from tensorgraph.errors import LoadError, RunError, SaveError

__all__ = ["PromptCache", "load_prompt_cache", "program_identity", "save_prompt_cache"]

FORMAT = 1
# program -> its identity: a program is frozen, and hashing a large model's weights on
# every resumed generation would cost more than the prompt it saves.
_IDENTITIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def program_identity(program: object) -> str:
    """The hex SHA-256 of a multi-entry program's state layout and bound weights (see
    the module docstring): equal for two programs whose states a prompt cache can move
    between, different when a weight, a state's shape or its offset differs. Computed
    once per program object."""
    if program not in _IDENTITIES:
        _IDENTITIES[program] = _identity(program)
    return _IDENTITIES[program]


def _identity(program: object) -> str:
    digest = hashlib.sha256()
    specs = {n.name: n for entry in program.entries.values() for n in entry.graph.states}
    layout = program.state_layout
    state = [
        (name, specs[name].shape, specs[name].dtype.name, layout[name]) for name in sorted(specs)
    ]
    digest.update(json.dumps({"states": state, "size": program.state_size}).encode())
    weights: dict[str, np.ndarray] = {}
    for entry in program.entries.values():  # entries bind the same arrays under one name
        for name, value in entry.graph.param_values.items():
            weights.setdefault(name, value)
    for name in sorted(weights):
        value = np.ascontiguousarray(weights[name])
        digest.update(json.dumps([name, str(value.dtype), value.shape]).encode())
        digest.update(value.view(np.uint8).reshape(-1).data)
    return digest.hexdigest()


def _frozen_arrays(values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    copies = {name: np.array(value, copy=True) for name, value in values.items()}
    for value in copies.values():
        value.flags.writeable = False
    return copies


def _frozen_array(value: object) -> np.ndarray:
    copy = np.array(value, copy=True)
    copy.flags.writeable = False
    return copy


@frozen
class PromptCache:
    """A program's state after `prompt` (see the module docstring): read-only copies."""

    identity: str
    prompt: np.ndarray = field(converter=_frozen_array)
    logits: np.ndarray = field(converter=_frozen_array)
    states: Mapping[str, np.ndarray] = field(converter=_frozen_arrays)

    @property
    def length(self) -> int:
        """Prompt tokens the cache holds (its next position)."""
        return int(self.prompt.shape[1])

    def check_program(self, program: object, identity: str | None = None) -> None:
        """RunError unless the cache was made by a program of `program`'s identity
        (`identity`: program_identity(program), when the caller has it)."""
        identity = program_identity(program) if identity is None else identity
        if identity != self.identity:
            raise RunError(
                f"the prompt cache was made by another program (identity "
                f"{self.identity[:12]}, this program's is {identity[:12]}: other weights "
                "or another state layout)"
            )


def save_prompt_cache(cache: PromptCache, path: str | os.PathLike) -> None:
    """Write `cache` to `path` (see the module docstring for the format). SaveError
    naming the path when the filesystem refuses it."""
    meta = {"format": FORMAT, "prompt": list(cache.prompt.shape), "states": sorted(cache.states)}
    arrays = {
        "identity": np.array(cache.identity),
        "meta": np.array(json.dumps(meta)),
        "prompt": np.ascontiguousarray(cache.prompt, np.int32),
        "logits": np.asarray(cache.logits, np.float32),
    }
    for name, value in cache.states.items():
        arrays[f"state:{name}"] = np.ascontiguousarray(value).view(np.uint8).reshape(-1)
    try:
        with open(path, "wb") as file:
            np.savez(file, **arrays)
    except OSError as err:
        raise SaveError(f"cannot write the prompt cache {str(path)!r}: {err.strerror}") from err


def load_prompt_cache(path: str | os.PathLike, program: object) -> PromptCache:
    """The prompt cache saved at `path`, for `program`. LoadError naming the path when
    the file is missing or not a prompt cache, when it was made by another program
    (another identity), or when its arrays do not fit the program's states."""
    where = f"prompt cache {str(path)!r}"
    try:
        with np.load(path, allow_pickle=False) as saved:
            arrays = {name: saved[name] for name in saved.files}
    except FileNotFoundError as err:
        raise LoadError(f"{where}: no such file") from err
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        raise LoadError(f"{where} is not a prompt cache file: {err}") from err
    try:
        identity = str(arrays["identity"][()])
        meta = json.loads(str(arrays["meta"][()]))
        prompt, logits = arrays["prompt"], arrays["logits"]
    except (KeyError, ValueError) as err:
        raise LoadError(f"{where} is not a prompt cache file (no {err})") from err
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise LoadError(f"{where}: format {meta!r:.60} is not prompt cache format {FORMAT}")
    own = program_identity(program)
    if identity != own:
        raise LoadError(
            f"{where} was made by another program (identity {identity[:12]}, this "
            f"program's is {own[:12]}: other weights or another state layout)"
        )
    specs = {n.name: n for entry in program.entries.values() for n in entry.graph.states}
    states = {}
    for name, node in specs.items():
        raw = arrays.get(f"state:{name}")
        dtype = np.dtype(node.dtype.to_numpy())
        if raw is None or raw.dtype != np.uint8 or raw.size != node.nbytes:
            raise LoadError(f"{where}: state {name!r} is missing or not {node.nbytes} bytes")
        states[name] = raw.view(dtype).reshape(node.shape)
    if prompt.ndim != 2 or prompt.dtype != np.int32 or logits.ndim != 2:
        raise LoadError(f"{where}: prompt {prompt.shape} {prompt.dtype} or logits {logits.shape}")
    return PromptCache(identity, prompt, logits, states)
