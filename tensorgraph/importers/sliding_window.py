"""Sliding-window attention over a ring buffer of the window's length, for the static
cache of `importers.generation`: the torch side (a cache layer and the attention masks
that export cleanly), which the importer then maps like any other cache.

transformers' own `StaticSlidingWindowLayer` cannot be exported with a run-time
position: it branches in Python on a host counter (full or not, one row or many). Here
a sliding layer of window W < max_seq is a `RingLayer` instead: keys and values of shape
(B, kv heads, W, head dim), the token at position p in row p mod W, as mlx-lm's
RotatingKVCache keeps them. Layers of window >= max_seq, and full-attention layers, stay
plain `StaticLayer`s of max_seq rows (a window that long never excludes a key there).

Which key a query admits is transformers' rule for every family that slides (Mistral,
Starcoder2, Qwen2/3, Gemma 2/3, masking_utils.sliding_window_causal_mask_function): the
query at position q sees the key at position k when q - W < k <= q, W = the config's
`sliding_window`; so W keys, its own included. A ring slot holds no position of its
own: it is derived from the call's `position` P, under the contract that calls run in
order (each call's position is the previous call's position plus its real length, or 0
for a fresh start): slot s then holds the largest p < P (or <= P, once the call wrote
its row) with p mod W == s; p < 0 means the slot was never written and no query admits
it. Rewinding a ring to an earlier position is outside that contract (its rows are gone).

One call of L rows at position P with `length` real rows (the rest padding):

- L == 1 (decode, or a one-row bucket): the row goes to slot P mod W (a `slice_update`
  at a run-time start once imported), then the query attends over the W ring rows.
- L > 1 (prefill): the queries attend over the old ring (W rows, positions < P) followed
  by the chunk's own L rows (positions P .. P + L - 1), so a prompt longer than the
  window, or a bucket, sees its own keys within the window; then slot s takes chunk row
  j_s = e - ((e + P - s) mod W), e = length - 1, the last real row that maps to s,
  where j_s >= 0, and keeps its old row otherwise. Only real rows are written: a padding
  row's slot may hold a key that the next query still needs (in a bucket of 8 with 5
  real rows at P = 20, W = 16, padding row 6 maps to slot 10, which holds position 10,
  inside the window of the query at 25), so the write is masked by `length`. That
  masked rewrite is no chain of slice_updates, so `quantize_states` keeps a ring float.

Masks are built here, one per layer type, in the format of the model's attention
implementation (bool for "sdpa", 0 / the dtype's minimum added to the scores for
"eager"), and handed to the model as transformers' own `causal_mask_mapping` (a dict by
layer type, for configs with `layer_types`) or as one 4-D mask (configs without, whose
layers all slide alike); the model then builds none of its own. Chunked attention
(Llama 4), which transformers also caches in a StaticSlidingWindowLayer, masks by chunk,
not by window: `layer_kinds` refuses it by name.
"""

from __future__ import annotations

from collections.abc import Sequence

from attrs import frozen

from tensorgraph.errors import GraphError
from tensorgraph.importers.torch_compat import import_transformers

try:
    import torch

    import_transformers()
    from transformers.cache_utils import StaticLayer
except ImportError as err:  # pragma: no cover - exercised only without torch
    raise ImportError(
        "tensorgraph.importers.sliding_window needs torch and transformers: "
        "pip install 'tensorgraph[models]'"
    ) from err

__all__ = ["LayerKind", "RingLayer", "attention_masks", "layer_kinds", "replace_sliding_layers"]

FULL, SLIDING = "full_attention", "sliding_attention"
MASK_FORMATS = ("sdpa", "eager")


class RingLayer(StaticLayer):
    """A sliding-window cache layer of `window` rows used as a ring (see the module
    docstring): `update` writes the call's real rows and returns the keys and values the
    queries attend over, whose positions `key_positions` gives. `cumulative_length`
    holds the call's position and `length` its number of real rows, both set by the
    caller before the model runs (the length tensor is shared by every ring layer)."""

    is_sliding = True

    def __init__(self, window: int, length: torch.Tensor) -> None:
        super().__init__(max_cache_len=window)
        self.length = length

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: object, **kwargs: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        # read the position, then advance the counter as StaticLayer does: each layer's
        # counter then ends as its own value (torch.export's signature cannot take one
        # node as the mutation of several buffers), which no entry reads back
        position = self.cumulative_length.clone()
        self.cumulative_length.add_(key_states.shape[-2])
        if key_states.shape[-2] == 1:
            slot = torch.remainder(position, self.max_cache_len).reshape(1)
            self.keys.index_copy_(2, slot, key_states)
            self.values.index_copy_(2, slot, value_states)
            return self.keys, self.values
        # read the old ring before it is written: the chunk's queries need both
        keys = torch.cat((self.keys, key_states), dim=2)
        values = torch.cat((self.values, value_states), dim=2)
        last = self.length - 1
        source = last - torch.remainder(last + position - self._slots(), self.max_cache_len)
        fresh = (source >= 0).reshape(-1, 1)
        rows = source.clamp(min=0)
        self.keys.copy_(torch.where(fresh, key_states.index_select(2, rows), self.keys))
        self.values.copy_(torch.where(fresh, value_states.index_select(2, rows), self.values))
        return keys, values

    def _slots(self) -> torch.Tensor:
        return torch.arange(self.max_cache_len, device=self.device)

    def key_positions(self, position: torch.Tensor, rows: int) -> torch.Tensor:
        """The absolute positions of the keys `update` returns for a call of `rows` rows
        at `position` (1-D int64; negative for a slot never written)."""
        window = self.max_cache_len
        if rows == 1:
            return position - torch.remainder(position - self._slots(), window)
        before = position - 1
        ring = before - torch.remainder(before - self._slots(), window)
        return torch.cat((ring, position + torch.arange(rows, device=self.device)))

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        raise GraphError("a ring cache layer's masks come from sliding_window.attention_masks")


@frozen
class LayerKind:
    """What one decoder layer's attention is: its transformers layer `type` (FULL or
    SLIDING), the `window` its mask applies (None for FULL) and whether its cache is a
    ring (`RingLayer`) or a plain StaticLayer of max_seq rows."""

    type: str
    window: int | None
    ring: bool


def layer_kinds(config: object, max_seq: int) -> list[LayerKind]:
    """Each layer's kind from the text config, as transformers' StaticCache lays it out
    (`get_layer_types_and_kwargs`); GraphError naming any layer type other than full or
    sliding attention (chunked, linear, shared...), for mixed types without the
    config's `layer_types` (the model then takes one mask for all), or for an attention
    implementation whose masks `attention_masks` does not build (not in MASK_FORMATS)."""
    from transformers.cache_utils import get_layer_types_and_kwargs

    implementation = config._attn_implementation
    if implementation not in MASK_FORMATS:
        raise GraphError(
            f"from_torch_generation: attention implementation {implementation!r} with a "
            f"sliding window (masks are built for {list(MASK_FORMATS)})"
        )
    types, kwargs = get_layer_types_and_kwargs(config)
    types = types[: len(kwargs)]
    bad = sorted({t for t in types if t not in (FULL, SLIDING)})
    if bad:
        raise GraphError(
            f"from_torch_generation: layer types {bad} of {type(config).__name__} do not "
            f"import (only {FULL!r} and {SLIDING!r})"
        )
    if getattr(config, "layer_types", None) is None and len(set(types)) > 1:
        raise GraphError(
            f"from_torch_generation: {type(config).__name__} mixes layer types "
            f"{sorted(set(types))} without `layer_types` to give each layer its mask"
        )
    kinds = []
    # zip as StaticCache does: a config whose layer count was lowered after `layer_types`
    # was made (the CLI's shrunk configs) keeps its first num_hidden_layers types
    for kind, options in zip(types, kwargs, strict=False):
        window = options.get("sliding_window") if kind == SLIDING else None
        kinds.append(LayerKind(kind, window, window is not None and window < max_seq))
    return kinds


def replace_sliding_layers(cache: object, kinds: Sequence[LayerKind], max_seq: int) -> torch.Tensor:
    """Put a RingLayer (ring kinds) or a StaticLayer of max_seq rows (the others) in
    place of every sliding layer of transformers' StaticCache `cache`, before its
    initialisation; returns the length tensor the ring layers share (set it per call)."""
    length = torch.tensor(0, dtype=torch.int64)  # states start as zeros
    for i, kind in enumerate(kinds):
        if kind.ring:
            cache.layers[i] = RingLayer(kind.window, length)
        elif kind.type == SLIDING:
            cache.layers[i] = StaticLayer(max_cache_len=max_seq)
    return length


def attention_masks(
    cache: object,
    kinds: Sequence[LayerKind],
    config: object,
    position: torch.Tensor,
    rows: int,
    batch: int,
    dtype: torch.dtype,
) -> torch.Tensor | dict[str, torch.Tensor]:
    """The attention masks for a call of `rows` query rows at `position`: per layer
    type, (batch, 1, rows, keys) in the format of `config._attn_implementation`; a
    dict by layer type when the config has `layer_types`, else the one mask."""
    implementation = config._attn_implementation
    queries = (position + torch.arange(rows)).reshape(-1, 1)
    masks: dict[str, torch.Tensor] = {}
    for layer, kind in zip(cache.layers, kinds, strict=True):
        if kind.type in masks:
            continue
        if kind.ring:
            keys = layer.key_positions(position, rows).reshape(1, -1)
        else:
            keys = torch.arange(layer.max_cache_len).reshape(1, -1)
        admitted = (keys <= queries) & (keys >= 0)
        if kind.window is not None:
            admitted = admitted & (keys > queries - kind.window)
        admitted = admitted.expand(batch, 1, *admitted.shape)
        if implementation == "eager":
            zero = torch.zeros((), dtype=dtype)
            admitted = torch.where(admitted, zero, torch.finfo(dtype).min)
        masks[kind.type] = admitted
    if getattr(config, "layer_types", None) is not None:
        return masks
    return next(iter(masks.values()))  # one kind: layer_kinds checked it
