"""Import a transformers causal LM for generation: prefill and decode entries over one
static KV cache held as tensorgraph state.

`from_torch_generation(model, max_seq=..., prompt_buckets=(32,), batch=1)` wraps the
model with a transformers `StaticCache` of `max_seq` positions whose tensors are buffers
of the wrapper (`key_cache_{i}`, `value_cache_{i}`, `cumulative_length_{i}` for layer
i, as transformers' own ExecuTorch recipe registers them), exports one program per entry
with `torch.export` (strict, as that recipe does), and imports each with the importer of
`importers.torch_export`: the buffers the program mutates become states of those names
and their mutations the state updates, so every entry reads and writes the same cache.
States no entry reads are then dropped, so the entries' states are exactly the
`key_cache_{i}` and `value_cache_{i}` of shape (B, kv heads, max_seq, head dim), except
that a sliding-window layer of window W < max_seq (Mistral, Gemma 2/3, Starcoder2...)
holds `key_ring_{i}` and `value_ring_{i}` of shape (B, kv heads, W, head dim), a ring
buffer, and then the wrapper builds every attention mask itself (see
`importers.sliding_window`: the ring layer, its masked write, the masks). The result is
a dict ready for `tg.compile(entries)` (one MultiProgram).

Entries (all token ids and positions int64; B = `batch`, V = the vocabulary size):

- `"prefill{L}"` for each L in `prompt_buckets`: inputs `input_ids` (B, L), the prompt
  padded to L with any token id; `position` (), the cache position of input_ids[:, 0]
  (0 for a fresh prompt); `length` (), the number of real tokens, 1 <= length <= L.
  Output: the logits (B, 1, V) of the last real token, input_ids[:, length - 1] (only
  that row goes through the LM head). The cache gets all L rows at positions position ..
  position + L - 1; the padding rows are harmless: attention is causal by position, and
  decode overwrites position + length, + length + 1, ... before any query reads them.
- `"decode"`: inputs `input_ids` (B, 1), the token to append; `position` (), its cache
  position. Output: its logits (B, 1, V).
- `"prefill"`, with `prefill="symbolic"` in place of the buckets: inputs `input_ids`
  (B, prompt), the prompt unpadded, over `tg.Dim("prompt", min=1, max=max_seq)` (exported
  with `torch.export.Dim` of that name and range in `dynamic_shapes`, mapped by
  `importers.sym_sizes`), and `position` (). Output: the logits (B, 1, V) of its last row
  (transformers' `logits_to_keep=1`, a slice from the symbolic end). The cache gets
  exactly the prompt's rows, `slice_update` at `position` of (B, kv heads, prompt, head
  dim) rows; the causal mask is (prompt, max_seq); a ring layer's write and masks take
  the prompt's length as its real length. One entry serves every length: a call runs its
  concrete program at the call's length (tensorgraph/symbolic_program.py).

Every row of a batch shares `position` and `length`. A write past the cache (position +
rows > max_seq) is a RunError at run time (the cache write's start check); a ring has
no such bound, its rows wrap, so a model whose every layer slides takes any position.
How the exported program writes the cache, and so what the importer maps: at the start of a
call every `cumulative_length_{i}` is set to `position` (written and never read back:
dropped), and the positions `arange(L) + position` are passed as `position_ids` where
the model takes them; the cache rows go through
`keys.index_copy_(2, arange(L) + position, k)`, which Core ATen spells
`index_put(keys, [None, None, positions], k)` and the importer maps to a `slice_update`
at `position` (the rows are that contiguous run: `patterns.first_row`); the attention
mask is `arange(max_seq) <= positions[:, None]` (causal by position) over the whole
cache, and the grouped-query heads torch repeats per query head (transformers' own
repeat_kv, an expand + reshape) read the unrepeated cache (`patterns.grouped_heads`).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

from tensorgraph.errors import GraphError
from tensorgraph.importers.torch_export import _first_line, from_exported
from tensorgraph.ir import api as tg
from tensorgraph.prefill_modes import check_prefill_mode

try:
    import torch
except ImportError as err:  # pragma: no cover - exercised only without torch
    raise ImportError(
        "tensorgraph.importers.generation needs torch: pip install 'tensorgraph[models]'"
    ) from err

__all__ = ["from_torch_generation"]


class _StaticCacheLM(torch.nn.Module):
    """`model` over a StaticCache whose tensors are this module's buffers, called with a
    start position (and, for prefill, the number of real tokens); returns the logits."""

    def __init__(self, model: torch.nn.Module, batch: int, max_seq: int) -> None:
        super().__init__()
        from transformers.cache_utils import StaticCache, StaticLayer, StaticSlidingWindowLayer

        from tensorgraph.importers import sliding_window

        config = model.config.get_text_config()
        self.model = model
        self.batch = batch
        # Set while the symbolic prefill exports: only the last row's logits, as the
        # bucketed prefill's `logits_to_keep` gives them (the prompt is all real tokens).
        self.last_row_only = False
        self.takes_positions = "position_ids" in inspect.signature(model.forward).parameters
        self.cache = StaticCache(max_cache_len=max_seq, config=config)
        known = (StaticLayer, StaticSlidingWindowLayer)
        kinds = sorted({type(layer).__name__ for layer in self.cache.layers})
        if not all(type(layer) in known for layer in self.cache.layers):
            raise GraphError(
                f"from_torch_generation: {type(model).__name__}'s cache has layers {kinds}; "
                "only full-attention and sliding-window static caches import"
            )
        # Sliding layers become rings of the window's length (sliding_window.py), and the
        # wrapper builds every mask; a cache without them keeps transformers' own masks.
        self.kinds = None
        if any(type(layer) is StaticSlidingWindowLayer for layer in self.cache.layers):
            self.kinds = sliding_window.layer_kinds(config, max_seq)
            ring_length = sliding_window.replace_sliding_layers(self.cache, self.kinds, max_seq)
            self.register_buffer("ring_length", ring_length, persistent=False)
        device = next(model.parameters()).device
        heads, head_dim = _written_head_shapes(model, batch, device)
        self.cache.early_initialization(batch, heads, head_dim, model.dtype, device)
        for i, layer in enumerate(self.cache.layers):
            kind = "ring" if isinstance(layer, sliding_window.RingLayer) else "cache"
            self.register_buffer(f"key_{kind}_{i}", layer.keys, persistent=False)
            self.register_buffer(f"value_{kind}_{i}", layer.values, persistent=False)
            self.register_buffer(
                f"cumulative_length_{i}", layer.cumulative_length, persistent=False
            )

    def forward(
        self,
        input_ids: torch.Tensor,
        position: torch.Tensor,
        length: torch.Tensor | None = None,
    ) -> torch.Tensor:
        # The cache writes its rows at arange(L) + cumulative_length, and the model takes
        # its positions (rope, mask) from the same counter: setting it is the whole
        # positioning, as in transformers' TorchExportableModuleWithStaticCache.
        for layer in self.cache.layers:
            layer.cumulative_length.copy_(position)
        keep = {} if length is None else {"logits_to_keep": (length - 1).reshape(1)}
        if self.last_row_only:
            keep = {"logits_to_keep": 1}
        mask = None
        if self.kinds is not None:
            from tensorgraph.importers import sliding_window

            if length is not None:  # a one-row call writes its row whatever the length
                self.ring_length.copy_(length)
            elif self.last_row_only:  # the symbolic prefill: every row is real
                self.ring_length.fill_(input_ids.shape[1])
            rows = input_ids.shape[1]
            config, dtype = self.model.config.get_text_config(), self.model.dtype
            mask = sliding_window.attention_masks(
                self.cache, self.kinds, config, position, rows, self.batch, dtype
            )
        # Explicit positions, (1, L) as Llama makes its own: a model that derives them
        # otherwise (OPT: a cumsum over a mask as long as the cache's data-dependent
        # length) exports with static shapes only when given them.
        if self.takes_positions:
            positions = torch.arange(input_ids.shape[1], dtype=torch.int64) + position
            keep["position_ids"] = positions.unsqueeze(0)
        out = self.model(
            input_ids=input_ids,
            attention_mask=mask,
            past_key_values=self.cache,
            use_cache=True,
            **keep,
        )
        return out.logits


def _written_head_shapes(
    model: torch.nn.Module, batch: int, device: torch.device
) -> tuple[list[int], list[int]]:
    """Per layer, the kv heads and head dim of what the model writes to its cache, from
    one eager call on a token (into a throwaway DynamicCache). The config's figures
    (transformers' get_head_shapes) are not always what the layers write: a multi-query
    Falcon writes 1 head whatever its num_kv_heads says, and a StaticCache sized from the
    config fails the first index_copy_."""
    with torch.no_grad():
        out = model(
            input_ids=torch.zeros(batch, 1, dtype=torch.int64, device=device), use_cache=True
        )
    layers = out.past_key_values.layers
    return [layer.keys.shape[1] for layer in layers], [layer.keys.shape[-1] for layer in layers]


def from_torch_generation(
    model: torch.nn.Module,
    *,
    max_seq: int,
    prompt_buckets: Sequence[int] = (32,),
    batch: int = 1,
    prefill: str = "buckets",
) -> dict[str, tg.Graph]:
    """Graphs "prefill{L}" (one per bucket L) and "decode" of a transformers causal LM
    (e.g. LlamaForCausalLM), sharing a static KV cache of `max_seq` positions as states;
    see the module docstring for each entry's inputs and output. With `prefill` =
    "symbolic", one "prefill" entry at the prompt's real length replaces the buckets
    (exported with a dynamic dim, see the module docstring; the buckets are then not
    used); prefill_modes.PREFILL_MODES says why "buckets" is the default. The model
    is put in eval mode; its weights are bound params (the same in every entry).
    GraphError for a bucket outside [1, max_seq], an unknown `prefill`, a cache with
    layers other than full-attention and sliding-window ones, or a failed export/import
    (naming the entry)."""
    if max_seq < 1 or batch < 1:
        raise GraphError(f"from_torch_generation: max_seq {max_seq} and batch {batch} must be >= 1")
    check_prefill_mode(prefill, "from_torch_generation")
    buckets = sorted(set(int(b) for b in prompt_buckets))
    bad = [b for b in buckets if not 1 <= b <= max_seq]
    if bad or not buckets:
        raise GraphError(
            f"from_torch_generation: prompt buckets {list(prompt_buckets)} must be non-empty "
            f"and within [1, max_seq={max_seq}]"
        )
    wrapper = _StaticCacheLM(model.eval(), batch, max_seq)
    position = torch.tensor(0, dtype=torch.int64)
    if prefill == "symbolic":
        entries = {"prefill": _export_symbolic_prefill(wrapper, batch, max_seq)}
        decode = {"input_ids": torch.zeros(batch, 1, dtype=torch.int64), "position": position}
        entries["decode"] = _export(wrapper, "decode", decode)
        return _without_unread_states(entries)
    examples = {
        f"prefill{b}": {
            "input_ids": torch.zeros(batch, b, dtype=torch.int64),
            "position": position,
            "length": torch.tensor(b, dtype=torch.int64),
        }
        for b in buckets
    }
    examples["decode"] = {
        "input_ids": torch.zeros(batch, 1, dtype=torch.int64),
        "position": position,
    }
    entries = {name: _export(wrapper, name, kwargs) for name, kwargs in examples.items()}
    return _without_unread_states(entries)


def _without_unread_states(entries: dict[str, tg.Graph]) -> dict[str, tg.Graph]:
    """The entries less the states that no entry reads, by a node or as an output (the
    `cumulative_length_{i}` counters, which every call overwrites with `position`
    first): no call's result depends on such a state's value, so dropping it and its
    update changes no output and saves carrying it in and out on every call."""
    read = set()
    for graph in entries.values():
        users, outputs = graph.users(), set(graph.outputs)
        read |= {node.name for node in graph.states if users[node.id] or node.id in outputs}
    return {name: _drop_states(graph, read) for name, graph in entries.items()}


def _drop_states(graph: tg.Graph, read: set[str]) -> tg.Graph:
    """`graph` without its states outside `read` (their state nodes and updates)."""
    dropped = {node.id for node in graph.states if node.name not in read}
    if not dropped:
        return graph
    positions = graph.state_positions
    gone = {k for name, k in positions.items() if name not in read}
    kept = [k for k in range(len(graph.outputs)) if k not in gone]
    new_position = {old: new for new, old in enumerate(kept)}
    return tg.Graph.from_nodes(
        graph.name,
        [node for node in graph.nodes if node.id not in dropped],
        [graph.outputs[k] for k in kept],
        graph.param_values,
        {name: new_position[k] for name, k in positions.items() if name in read},
    )


def _export_symbolic_prefill(wrapper: _StaticCacheLM, batch: int, max_seq: int) -> tg.Graph:
    """The "prefill" entry: `input_ids` (batch, prompt) over the dynamic dim
    `torch.export.Dim("prompt", min=1, max=max_seq)` (the importer's tg.Dim of that name
    and range, importers/sym_sizes.py), `position` (); the logits (batch, 1, V) of its
    last row. The cache write at `arange(prompt) + position` and the causal mask over
    positions follow the prompt's length, as the bucketed entries' follow their bucket's."""
    if max_seq < 2:  # torch specialises lengths 0 and 1: the example must be longer
        raise GraphError(
            f"from_torch_generation: a symbolic prefill needs max_seq >= 2, not {max_seq}"
        )
    prompt = torch.export.Dim("prompt", min=1, max=max_seq)
    kwargs = {
        "input_ids": torch.zeros(batch, min(max_seq, 16), dtype=torch.int64),
        "position": torch.tensor(0, dtype=torch.int64),
    }
    dynamic = {"input_ids": {1: prompt}, "position": None}
    wrapper.last_row_only = True
    try:
        return _export(wrapper, "prefill", kwargs, dynamic)
    finally:
        wrapper.last_row_only = False


def _export(
    wrapper: _StaticCacheLM,
    name: str,
    kwargs: dict[str, torch.Tensor],
    dynamic_shapes: dict[str, object] | None = None,
) -> tg.Graph:
    # Strict (dynamo) export, as transformers' recipe does: torch 2.13's non-strict export
    # of this program fails later, in run_decompositions ("expected compiled_fn to be
    # GraphModule"), and its pre-dispatch signature lists no buffer mutations.
    try:
        with torch.no_grad():
            program = torch.export.export(
                wrapper, (), kwargs, dynamic_shapes=dynamic_shapes, strict=True
            )
    except Exception as err:
        raise GraphError(f"importing {name!r} failed at step 'export': {_first_line(err)}") from err
    return from_exported(program, name)
