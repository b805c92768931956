"""The importer's two cache rewrites (importers.patterns), on small torch modules: a write
at `arange(L) + position` becomes a slice_update at a run-time start, and attention over
torch's repeat_kv reads the unrepeated kv heads; look-alikes that are not these patterns
(strided or given rows, a tiled head order) keep the general ops. Every result is checked
against an oracle: the rows written by hand, or torch's own attention."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="the torch extra is not installed")

import tensorgraph as tg  # noqa: E402
from tensorgraph.importers.torch_export import from_torch  # noqa: E402

BACKENDS = ("numpy", "arena", "mlx")
ROWS = 6  # the cache's length along the written axis (axis 2)


class RowWriter(torch.nn.Module):
    """cache[:, :, rows] = x, rows = arange(first, first + L) * step + pos (the
    StaticCache write when first = 0, step = 1; without `+ pos` when `fixed`), as
    index_copy_; returns cache + 0."""

    def __init__(
        self, first: int = 0, step: int = 1, cast: bool = False, fixed: bool = False
    ) -> None:
        super().__init__()
        self.first, self.step, self.cast, self.fixed = first, step, cast, fixed
        self.register_buffer("cache", torch.zeros(1, 2, ROWS, 3))

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        length = x.shape[2]
        dtype = torch.int32 if self.cast else torch.int64
        run = torch.arange(self.first, self.first + length, dtype=dtype)
        run = run * self.step if self.step != 1 else run
        if self.cast:  # an int32 run, widened to int64 after adding the position
            run = (run + pos.to(torch.int32)).to(torch.int64)
        elif not self.fixed:  # (fixed: arange alone, known when the graph is built)
            run = run + pos
        self.cache.index_copy_(2, run, x)
        return self.cache + 0


def ops(program: tg.Program) -> list[str]:
    return [node.op for node in program.graph.nodes]


def compiled(module: torch.nn.Module, length: int) -> tg.Program:
    example = (torch.ones(1, 2, length, 3), torch.tensor(0))
    return tg.compile(from_torch(module, example))


def written(rows: list[int], x: np.ndarray) -> np.ndarray:
    """The cache after writing x's slices at `rows` of a zero cache (the oracle)."""
    cache = np.zeros((1, 2, ROWS, 3), np.float32)
    for i, row in enumerate(rows):
        cache[:, :, row] = x[:, :, i]
    return cache


@pytest.fixture(scope="module")
def decode_write() -> tg.Program:
    return compiled(RowWriter(), 1)


@pytest.fixture(scope="module")
def prefill_write() -> tg.Program:
    return compiled(RowWriter(first=1), 3)


def test_a_position_plus_arange_write_is_a_slice_update(decode_write, prefill_write) -> None:
    for program in (decode_write, prefill_write, compiled(RowWriter(first=1, cast=True), 3)):
        assert "index_update" not in ops(program)
        assert ops(program).count("slice_update") == 1


@settings(max_examples=10)
@given(pos=st.integers(-1, ROWS - 4), seed=st.integers(0, 2**16))
def test_run_writes_land_at_position_plus_first(prefill_write, pos: int, seed: int) -> None:
    # rows arange(1, 4) + pos = pos + 1, pos + 2, pos + 3: within [0, ROWS) for these pos
    x = np.random.default_rng(seed).standard_normal((1, 2, 3, 3)).astype(np.float32)
    want = written([pos + 1, pos + 2, pos + 3], x)
    for backend in BACKENDS:
        state = prefill_write.new_state(backend)
        (got,) = prefill_write.run({"x": x, "pos": np.int64(pos)}, backend=backend, state=state)
        np.testing.assert_array_equal(got, want, err_msg=backend)
        np.testing.assert_array_equal(state["cache"], want, err_msg=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_negative_position_wraps_as_index_put_does(decode_write, backend: str) -> None:
    # index_put wraps index -1 to the last row, ROWS - 1; -2 to ROWS - 2
    x = np.arange(6, dtype=np.float32).reshape(1, 2, 1, 3)
    state = decode_write.new_state(backend)
    decode_write.run({"x": x, "pos": np.int64(-1)}, backend=backend, state=state)
    (got,) = decode_write.run({"x": x + 10, "pos": np.int64(-2)}, backend=backend, state=state)
    want = written([ROWS - 1], x)
    want[:, :, ROWS - 2] = x[:, :, 0] + 10
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_run_past_the_cache_is_a_run_error_before_writing(prefill_write, backend) -> None:
    # pos 3: rows 4, 5, 6, and 6 is past ROWS = 6; the start is 4, 3 rows
    state = prefill_write.new_state(backend)
    x = np.ones((1, 2, 3, 3), np.float32)
    with pytest.raises(tg.RunError, match=r"slice_update: start 4 \+ 3 rows is past the length 6"):
        prefill_write.run({"x": x, "pos": np.int64(3)}, backend=backend, state=state)
    np.testing.assert_array_equal(state["cache"], 0)


def test_fixed_rows_within_the_cache_are_a_slice_update_at_a_fixed_start() -> None:
    # rows arange(3, 5) = 3, 4; rows arange(5, 7) = 5, 6 leave the cache (6 rows): that
    # stays the index_update, whose range check names index 6
    inside, outside = (
        compiled(RowWriter(first=3, fixed=True), 2),
        compiled(RowWriter(first=5, fixed=True), 2),
    )
    (write,) = [node for node in inside.graph.nodes if node.op == "slice_update"]
    assert write.attr("start") == 3 and len(write.inputs) == 2
    assert ops(outside).count("index_update") == 1
    x = np.arange(12, dtype=np.float32).reshape(1, 2, 2, 3)
    for backend in BACKENDS:
        (got,) = inside.run(
            {"x": x, "pos": np.int64(0)}, backend=backend, state=inside.new_state(backend)
        )
        np.testing.assert_array_equal(got, written([3, 4], x), err_msg=backend)
        with pytest.raises(tg.RunError, match=r"index 6 is out of range"):
            outside.run(
                {"x": x, "pos": np.int64(0)}, backend=backend, state=outside.new_state(backend)
            )


class GivenRows(torch.nn.Module):
    """cache[:, :, rows] = x at rows given as an input (no arange), as index_copy_."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, 2, ROWS, 3))

    def forward(self, x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        self.cache.index_copy_(2, rows, x)
        return self.cache + 0


def test_rows_that_are_not_a_run_stay_an_index_update() -> None:
    strided = compiled(RowWriter(step=2), 3)  # rows 2 * arange(3) + pos: not contiguous
    given_rows = tg.compile(from_torch(GivenRows(), (torch.ones(1, 2, 2, 3), torch.tensor([0, 1]))))
    x3 = np.arange(18, dtype=np.float32).reshape(1, 2, 3, 3)
    x2 = x3[:, :, :2]
    for program, feeds, rows, x in (
        (strided, {"x": x3, "pos": np.int64(1)}, [1, 3, 5], x3),  # 1 + 0, 1 + 2, 1 + 4
        (given_rows, {"x": x2, "rows": np.array([4, 0])}, [4, 0], x2),
    ):
        assert ops(program).count("index_update") == 1
        assert "slice_update" not in ops(program)
        for backend in BACKENDS:
            (got,) = program.run(feeds, backend=backend, state=program.new_state(backend))
            np.testing.assert_array_equal(got, written(rows, x), err_msg=backend)


class Attention(torch.nn.Module):
    """torch's attention over 2 kv heads spread to the 4 query heads by `order`:
    "repeat_kv" (head h reads kv head h // 2, transformers' repeat_kv) or "tiled" (head
    h reads kv head h % 2); `values` False leaves v with its own 4 heads."""

    def __init__(self, order: str, values: bool = True) -> None:
        super().__init__()
        self.order, self.values = order, values

    def spread(self, t: torch.Tensor) -> torch.Tensor:
        b, heads, s, d = t.shape
        if self.order == "repeat_kv":
            return t[:, :, None].expand(b, heads, 2, s, d).reshape(b, 2 * heads, s, d)
        return t[:, None].expand(b, 2, heads, s, d).reshape(b, 2 * heads, s, d)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        v = self.spread(v) if self.values else v
        return torch.nn.functional.scaled_dot_product_attention(q, self.spread(k), v)


def attention_case(order: str, values: bool) -> tuple[tg.Program, dict, np.ndarray]:
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 4, 2, 8)).astype(np.float32)
    k = rng.standard_normal((1, 2, 5, 8)).astype(np.float32)
    v = rng.standard_normal((1, 4 if not values else 2, 5, 8)).astype(np.float32)
    module = Attention(order, values)
    tensors = tuple(torch.from_numpy(a) for a in (q, k, v))
    with torch.no_grad():
        want = module(*tensors).numpy()
    return tg.compile(from_torch(module, tensors)), {"q": q, "k": k, "v": v}, want


def kv_heads(program: tg.Program) -> tuple[int, int]:
    (node,) = [n for n in program.graph.nodes if n.op == "scaled_dot_product_attention"]
    return tuple(program.graph.node(i).shape[1] for i in node.inputs[1:3])


@pytest.mark.parametrize(
    ("order", "values", "heads"),
    [("repeat_kv", True, (2, 2)), ("tiled", True, (4, 4)), ("repeat_kv", False, (4, 4))],
)
def test_attention_reads_repeat_kv_heads_unrepeated(order: str, values: bool, heads) -> None:
    # Only a repeat_kv of both k and v is undone (2 kv heads, no broadcast left); the
    # tiled order (head h is kv head h % 2) is not what grouped attention reads, and a v
    # with its own heads leaves k as torch gave it. Every case equals torch's attention.
    program, feeds, want = attention_case(order, values)
    assert kv_heads(program) == heads
    assert ("broadcast_to" in ops(program)) == (heads == (4, 4))
    for backend in BACKENDS:
        (got,) = program.run(feeds, backend=backend)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=backend)


class WrittenOutAttention(torch.nn.Module):
    """transformers' eager attention (what Gemma 2 imports for its soft-capping):
    scores = q @ repeat(k)^T, capped by tanh, softmax, then @ repeat(v), with the kv
    heads spread to the query heads in `order` (see Attention.spread)."""

    def __init__(self, order: str, copies: int) -> None:
        super().__init__()
        self.order, self.copies = order, copies

    def spread(self, t: torch.Tensor) -> torch.Tensor:
        b, heads, s, d = t.shape
        n = self.copies
        if self.order == "repeat_kv":
            return t[:, :, None].expand(b, heads, n, s, d).reshape(b, n * heads, s, d)
        return t[:, None].expand(b, n, heads, s, d).reshape(b, n * heads, s, d)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(q, self.spread(k).transpose(2, 3)) * 0.25
        scores = torch.tanh(scores / 30.0) * 30.0
        return torch.matmul(torch.softmax(scores, dim=-1), self.spread(v))


def check_written_out_attention(
    order: str, batch: int, groups: int, copies: int, rows: int, keys: int
) -> None:
    """Regression (issue 25): Gemma 2's eager attention imported its products over
    repeat_kv's copy of the cache per query head (2 x 512 KiB a layer per decode step, a
    1 MiB arena and a decode entry cut into segments). A repeat_kv (head h reads kv head
    h // n) is multiplied per kv head with no broadcast copy left and the keys read as
    stored; a tiling (head h reads kv head h % Hkv) keeps torch's products. Both equal
    torch."""
    rng = np.random.default_rng(batch * 100 + groups * 10 + copies + rows * 7 + keys)
    q = rng.standard_normal((batch, groups * copies, rows, 4)).astype(np.float32)
    k = rng.standard_normal((batch, groups, keys, 4)).astype(np.float32)
    v = rng.standard_normal((batch, groups, keys, 4)).astype(np.float32)
    module = WrittenOutAttention(order, copies)
    tensors = tuple(torch.from_numpy(a) for a in (q, k, v))
    with torch.no_grad():
        want = module(*tensors).numpy()
    program = tg.compile(from_torch(module, tensors))
    grouped = order == "repeat_kv" and copies > 1
    assert ("broadcast_to" in ops(program)) == (order == "tiled" and copies > 1)
    assert "transpose" not in ops(program) or not grouped
    for backend in BACKENDS:
        (got,) = program.run({"q": q, "k": k, "v": v}, backend=backend)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=backend)


@pytest.mark.parametrize(
    ("order", "batch", "groups", "copies", "rows", "keys"),
    [("repeat_kv", 2, 2, 2, 3, 5), ("repeat_kv", 1, 1, 3, 1, 4), ("tiled", 1, 2, 2, 2, 3)],
)
def test_written_out_attention_multiplies_the_unrepeated_kv_heads(
    order: str, batch: int, groups: int, copies: int, rows: int, keys: int
) -> None:
    check_written_out_attention(order, batch, groups, copies, rows, keys)


@pytest.mark.slow
@settings(max_examples=12, deadline=None)
@given(
    order=st.sampled_from(("repeat_kv", "tiled")),
    batch=st.integers(1, 2),
    groups=st.integers(1, 3),
    copies=st.integers(1, 3),
    rows=st.integers(1, 3),
    keys=st.integers(1, 6),
)
def test_written_out_attention_over_random_head_layouts(
    order: str, batch: int, groups: int, copies: int, rows: int, keys: int
) -> None:
    check_written_out_attention(order, batch, groups, copies, rows, keys)
