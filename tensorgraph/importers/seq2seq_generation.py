"""Import a transformers encoder-decoder model (Whisper, T5, BART, Marian, ...) for
generation: an encode entry and a decode entry over one static cache held as
tensorgraph state.

`from_torch_seq2seq_generation(model, max_seq=..., source_len=..., batch=1)` wraps the
model with a transformers `EncoderDecoderCache(StaticCache, StaticCache)`: a
self-attention cache of `max_seq` rows and a cross-attention cache of the encoder's
length, whose tensors are buffers of the wrapper (`self_key_{i}`, `self_value_{i}`,
`cross_key_{i}`, `cross_value_{i}` for decoder layer i, and their
`*_length_{i}` counters), exports one program per entry with strict `torch.export` and
imports each with `importers.torch_export.from_exported`, as `from_torch_generation`
does for a causal LM: the buffers a program mutates become states of those names, so
both entries read and write the same cache. States no entry reads are dropped.

Entries (token ids, lengths and positions int64; B = `batch`, V = the vocabulary):

- `"encode"`: the source, then `input_ids` (B, 1), the decoder's first token (its
  decoder_start_token_id). A speech model (its encoder takes `input_features`) gets
  `input_features` (B, n_mels, frames), the log-mel features its feature extractor makes
  (frames fixed by the encoder: 2 * max_source_positions for Whisper); a text model gets
  `source_ids` (B, source_len), the source padded on the right with any id, and
  `source_length` (), its real length (1 <= source_length <= source_len). The entry runs
  the encoder once, then the decoder's first step at position 0, and returns that step's
  logits (B, 1, V). It writes every decoder layer's cross-attention keys and values of
  the whole source into `cross_key_{i}` / `cross_value_{i}` (B, heads, S_enc,
  head_dim), the first token's self-attention row into `self_key_{i}` /
  `self_value_{i}` (B, heads, max_seq, head_dim), and, for a text model, the source mask
  `arange(source_len) < source_length` (B, source_len) into the state `source_mask`.
  Every state an encode writes is written whole (the cross caches and mask) or at row 0,
  so nothing an earlier input left there is read by the new input's steps.
- `"decode"`: `input_ids` (B, 1), the token to append, and `position` (), its cache
  position (>= 1). It writes the token's self-attention row at `position` (a RunError at
  run time past max_seq, the cache write's start check), attends causally over the self
  cache (arange(max_seq) <= position) and, under the source mask, over the cross caches,
  which it only reads; returns the token's logits (B, 1, V).

How transformers is led there: before each call the wrapper sets every self layer's
`cumulative_length` to the step's position and every cross layer's to 0 (the cache
writes its rows at arange(rows) + cumulative_length, and the decoder takes its
positions from the same counter), and sets `EncoderDecoderCache.is_updated` per layer:
False in encode, so the decoder's cross attention projects the encoder output and writes
the cross cache; True in decode, so it reads the cache and never touches the encoder
output (decode passes zeros of the encoder output's shape, which nothing reads, and the
importer's dead-code elimination drops them). The padded source rows of a text model
are masked in the encoder's self-attention and in every cross-attention, so its
real-row outputs are those of the unpadded source.
"""

from __future__ import annotations

import copy

from tensorgraph.errors import GraphError
from tensorgraph.importers.generation import _without_unread_states
from tensorgraph.importers.stand_ins import stand_ins
from tensorgraph.importers.torch_export import _first_line, from_exported
from tensorgraph.ir import api as tg

try:
    import torch
except ImportError as err:  # pragma: no cover - exercised only without torch
    raise ImportError(
        "tensorgraph.importers.seq2seq_generation needs torch: pip install 'tensorgraph[models]'"
    ) from err

__all__ = ["decoder_layer_count", "encoder_length", "from_torch_seq2seq_generation", "is_speech"]


def is_speech(model: torch.nn.Module) -> bool:
    """Whether the model's encoder takes `input_features` (log-mel frames, as Whisper's)
    rather than token ids."""
    return getattr(model, "main_input_name", "input_ids") == "input_features"


def decoder_layer_count(config: object) -> int:
    """The decoder's layers (`decoder_layers`: Whisper, BART, Marian; `num_decoder_layers`:
    T5, Switch Transformers)."""
    for field in ("decoder_layers", "num_decoder_layers"):
        value = getattr(config, field, None)
        if isinstance(value, int) and value > 0:
            return value
    raise GraphError(
        f"from_torch_seq2seq_generation: {type(config).__name__} names no decoder layer "
        "count (decoder_layers or num_decoder_layers)"
    )


def encoder_length(model: torch.nn.Module, source_len: int | None) -> int:
    """Rows of the encoder's output: a speech encoder's `max_source_positions`, or a text
    encoder's `source_len` (GraphError when it is missing or not a positive int)."""
    if is_speech(model):
        return int(model.config.max_source_positions)
    if isinstance(source_len, bool) or not isinstance(source_len, int) or source_len < 1:
        raise GraphError(
            f"from_torch_seq2seq_generation: a text model needs source_len >= 1 but got "
            f"{source_len!r}"
        )
    return source_len


class _Seq2SeqCache(torch.nn.Module):
    """`model` over an EncoderDecoderCache of two StaticCaches whose tensors are this
    module's buffers; `forward` is the encode entry without `position`, the decode entry
    with it (see the module docstring)."""

    def __init__(
        self, model: torch.nn.Module, batch: int, max_seq: int, source_len: int | None
    ) -> None:
        super().__init__()
        from transformers.cache_utils import EncoderDecoderCache, StaticCache, StaticLayer

        self.model = model
        self.speech = is_speech(model)
        config = copy.deepcopy(model.config)
        config.num_hidden_layers = decoder_layer_count(model.config)
        self.enc_rows = encoder_length(model, source_len)
        caches = (
            StaticCache(max_cache_len=max_seq, config=config),
            StaticCache(max_cache_len=self.enc_rows, config=config),
        )
        kinds = sorted({type(layer).__name__ for c in caches for layer in c.layers})
        if kinds != [StaticLayer.__name__]:
            raise GraphError(
                f"from_torch_seq2seq_generation: {type(model).__name__}'s cache has layers "
                f"{kinds}; only full-attention StaticLayer caches import"
            )
        self.cache = EncoderDecoderCache(*caches)
        self.batch = batch
        if not self.speech:
            mask = torch.zeros(batch, self.enc_rows, dtype=torch.int64)
            self.register_buffer("source_mask", mask, persistent=False)
        # The layers' shapes (heads, head_dim of self and cross attention) come from the
        # model's own first call, as transformers' lazy initialization takes them; the
        # encoder's output class, from that call's encoder.
        example = self.example("encode")
        with torch.no_grad():
            source = example.get("source_ids")
            mask = None if source is None else torch.ones_like(source)
            self.encoder_output = type(self.encode(example.get("input_features"), source, mask))
            self.forward(**example)
        for side, cache in (("self", caches[0]), ("cross", caches[1])):
            for i, layer in enumerate(cache.layers):
                self.register_buffer(f"{side}_key_{i}", layer.keys, persistent=False)
                self.register_buffer(f"{side}_value_{i}", layer.values, persistent=False)
                self.register_buffer(
                    f"{side}_length_{i}", layer.cumulative_length, persistent=False
                )
        for buffer in self.buffers(recurse=False):  # states start as zeros
            buffer.zero_()

    def example(self, entry: str) -> dict[str, torch.Tensor]:
        """Example inputs of `entry` (zeros; position 1 for decode)."""
        ids = torch.zeros(self.batch, 1, dtype=torch.int64)
        if entry == "decode":
            return {"input_ids": ids, "position": torch.tensor(1, dtype=torch.int64)}
        if self.speech:
            config = self.model.config
            frames = self.model.get_encoder().config.max_source_positions * _downsampling(
                self.model
            )
            features = torch.zeros(self.batch, config.num_mel_bins, frames, dtype=self.model.dtype)
            return {"input_features": features, "input_ids": ids}
        return {
            "source_ids": torch.zeros(self.batch, self.enc_rows, dtype=torch.int64),
            "source_length": torch.tensor(self.enc_rows, dtype=torch.int64),
            "input_ids": ids,
        }

    def encode(
        self,
        input_features: torch.Tensor | None,
        source_ids: torch.Tensor | None,
        mask: torch.Tensor | None,
    ) -> object:
        """The encoder's output (a transformers ModelOutput) for the source."""
        encoder = self.model.get_encoder()
        if self.speech:
            return encoder(input_features=input_features)
        return encoder(input_ids=source_ids, attention_mask=mask)

    def forward(
        self,
        input_ids: torch.Tensor,
        position: torch.Tensor | None = None,
        input_features: torch.Tensor | None = None,
        source_ids: torch.Tensor | None = None,
        source_length: torch.Tensor | None = None,
    ) -> torch.Tensor:
        encoding = position is None
        for layer in self.cache.self_attention_cache.layers:
            if encoding:
                layer.cumulative_length.fill_(0)
            else:
                layer.cumulative_length.copy_(position)
        for layer in self.cache.cross_attention_cache.layers:
            layer.cumulative_length.fill_(0)
        for i in self.cache.is_updated:
            self.cache.is_updated[i] = not encoding
        mask = None
        if not self.speech:
            if encoding:
                rows = torch.arange(self.enc_rows, dtype=torch.int64)
                self.source_mask.copy_(
                    (rows < source_length).to(torch.int64).expand_as(self.source_mask)
                )
            mask = self.source_mask
        if encoding:
            encoded = self.encode(input_features, source_ids, mask)
        else:  # the encoder's output class (a MoE model's carries router logits) over zeros
            width = self.model.config.d_model
            hidden = torch.zeros(self.batch, self.enc_rows, width, dtype=self.model.dtype)
            encoded = self.encoder_output(last_hidden_state=hidden)
        out = self.model(
            encoder_outputs=encoded,
            attention_mask=mask,
            decoder_input_ids=input_ids,
            past_key_values=self.cache,
            use_cache=True,
        )
        return out.logits


def _downsampling(model: torch.nn.Module) -> int:
    """Frames per encoder position of a speech encoder (the product of its convolutions'
    strides: 2 for Whisper)."""
    encoder = model.get_encoder()
    stride = 1
    for name in ("conv1", "conv2"):
        conv = getattr(encoder, name, None)
        if conv is not None:
            stride *= conv.stride[0]
    return stride


def from_torch_seq2seq_generation(
    model: torch.nn.Module,
    *,
    max_seq: int,
    source_len: int | None = None,
    batch: int = 1,
) -> dict[str, tg.Graph]:
    """Graphs "encode" and "decode" of a transformers encoder-decoder LM (e.g.
    WhisperForConditionalGeneration, T5ForConditionalGeneration), sharing a
    self-attention cache of `max_seq` rows and the cross-attention caches as states; see
    the module docstring for each entry's inputs and output. `source_len` is the padded
    source length of a text model (a speech model's is fixed by its encoder, and
    `source_len` is ignored). The model is put in eval mode; its weights are bound
    params (the same in every entry). GraphError for max_seq < 2 or batch < 1, a text
    model without source_len, a cache with sliding-window layers, or a failed
    export/import (naming the entry)."""
    if isinstance(max_seq, bool) or not isinstance(max_seq, int) or max_seq < 2:
        raise GraphError(
            f"from_torch_seq2seq_generation: max_seq must be an int >= 2 (the start token and "
            f"one new token) but got {max_seq!r}"
        )
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise GraphError(f"from_torch_seq2seq_generation: batch must be >= 1 but got {batch!r}")
    if not getattr(model.config, "is_encoder_decoder", False):
        raise GraphError(
            f"from_torch_seq2seq_generation: {type(model).__name__} is no encoder-decoder "
            "model (config.is_encoder_decoder is false); use from_torch_generation"
        )
    wrapper = _Seq2SeqCache(model.eval(), batch, max_seq, source_len)
    # The wrapper's own buffers (the caches and mask), not the model's (a BART's
    # final_logits_bias stays a bound param).
    states = [name for name, _ in wrapper.named_buffers(recurse=False)]
    entries = {name: _export(wrapper, name, states) for name in ("encode", "decode")}
    return _without_unread_states(entries)


def _export(wrapper: _Seq2SeqCache, name: str, states: list[str]) -> tg.Graph:
    """Entry `name` exported (strict, as importers.generation does, for the same reason)
    under the stand-ins `from_torch` exports under (Switch Transformers' experts and
    router), and imported with every buffer in `states` a state, read or written."""
    try:
        with torch.no_grad(), stand_ins(wrapper):
            program = torch.export.export(wrapper, (), wrapper.example(name), strict=True)
    except Exception as err:
        raise GraphError(f"importing {name!r} failed at step 'export': {_first_line(err)}") from err
    return from_exported(program, name, states=states)
