"""How generation programs prefill a prompt, one list for the zoo's generation entries
(models/llama_generation.py) and the transformers importer's (importers/generation.py): its
own module because the importer may not import the zoo (tests/test_layers.py) and the
zoo must not need torch, which the importer imports."""

from __future__ import annotations

from tensorgraph.errors import GraphError

# How generation programs prefill a prompt: padded to a bucket, or at its real length
# through one symbolic entry. "buckets" stays the default because each new prompt
# length costs a specialisation (and, on MLX, a trace of its shape-dependent segments)
# on its first call (the MLX backend keeps MLX_CACHED_LENGTHS lengths): a server seeing
# few distinct lengths is served better by buckets; "symbolic" wins on compute and arena
# at a length between buckets (benches/README.md, "Prefill at the prompt's real length").
# Both save and load (program_io.py).
PREFILL_MODES = ("buckets", "symbolic")


def check_prefill_mode(prefill: object, who: str) -> None:
    """GraphError naming `prefill` unless it is one of PREFILL_MODES."""
    if prefill not in PREFILL_MODES:
        raise GraphError(f"{who}: prefill must be one of {PREFILL_MODES} but got {prefill!r}")
