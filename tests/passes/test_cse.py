"""CSE merges equal computations, commutative ones in either order, never inputs/params,
and compares attributes exactly (bit patterns, not Python's ==)."""

import copy
import math
import struct

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph import nn
from tensorgraph.ir.ops import OPS
from tensorgraph.models.common import Weights
from tensorgraph.models.llama import layer_weights
from tensorgraph.passes import cse
from tensorgraph.passes.cse import exact_key
from tests.passes.test_pipeline_properties import assert_same
from tests.strategies import feeds


def count(graph: tg.Graph, op: str) -> int:
    return sum(n.op == op for n in graph.nodes)


def test_commutative_operands_in_either_order_merge() -> None:
    g = tg.Graph()
    a, b = g.input("a", (3,)), g.input("b", (3,))
    g.output(a + b, b + a, a - b, b - a)
    result = cse(g)
    assert result.stats["merged"] == 1
    assert count(result.graph, "add") == 1 and count(result.graph, "sub") == 2


def test_equal_constants_merge_but_inputs_and_params_never() -> None:
    g = tg.Graph()
    a, b = g.input("a", (3,)), g.input("b", (3,))
    p, q = g.param("p", (3,)), g.param("q", (3,))
    g.output(a * 2.0, b * 2.0, p + q)
    result = cse(g)
    assert count(result.graph, "constant") == 1
    assert count(result.graph, "input") == 2 and count(result.graph, "param") == 2


def test_decoder_layers_share_one_mask_and_one_rotary_table() -> None:
    layers, seq, dim, heads = 4, 8, 16, 2
    g = tg.Graph("decoder")
    h = g.input("x", (1, seq, dim))
    weights = Weights(g)
    for i in range(layers):
        # Rebuilt in every layer, as a naive exporter emits them.
        cos, sin = nn.rotary_tables(g, seq, dim // heads)
        mask = nn.causal_mask(g, seq)
        params = layer_weights(weights, f"l{i}.", dim, 32)
        h = nn.llama_block(h, params, heads, cos, sin, mask)
    g.output(h)
    assert count(g, "where") == layers and count(g, "cos") == layers and count(g, "sin") == layers
    prog = tg.compile(g, passes=("dce", "cse", "view_alias", "reinplace"))  # no folding
    assert count(prog.graph, "where") == 1
    assert count(prog.graph, "cos") == 1 and count(prog.graph, "sin") == 1
    # Three distinct aranges survive: inv_freq exponents (0..4, float32), positions (0..8,
    # float32), and the mask's rows and columns, which are the same arange (0..8, int32).
    assert count(prog.graph, "arange") == 3
    # With folding, the one mask and the one pair of tables become constants: nothing of
    # them is computed at run time.
    folded = tg.compile(g)
    assert {"where", "cos", "sin", "arange"}.isdisjoint(n.op for n in folded.graph.nodes)
    assert folded.stats["fold"]["folded"] == 3  # mask, cos table, sin table
    inputs, _ = feeds(g)
    assert_same(
        prog.run(inputs, backend="arena"), tg.compile(g, passes=()).run(inputs, backend="numpy")
    )


# ---------------------------------------------------------------- exact attribute comparison


def test_full_of_minus_zero_and_plus_zero_stay_apart_on_every_backend() -> None:
    # Python's 0.0 == -0.0 once merged these two, so both quotients took one sign.
    # IEEE 754: a positive number divided by -0.0 is -inf, by +0.0 is +inf.
    g = tg.Graph("signed_zero")
    x = g.input("x", (4,), tg.float32)
    g.output(x / tg.full(g, (4,), -0.0), x / tg.full(g, (4,), 0.0))
    prog = tg.compile(g)
    fulls = sorted(np.copysign(1.0, n.attr("value")) for n in prog.graph.nodes if n.op == "full")
    assert fulls == [-1.0, 1.0], "one full of -0.0 and one of +0.0 survive"
    ones = np.array([1.0, 2.0, 0.5, 3.0], np.float32)
    for backend in ("numpy", "arena", "mlx"):
        minus, plus = (np.asarray(o) for o in prog.run({"x": ones}, backend=backend))
        assert minus.dtype == np.float32 and plus.dtype == np.float32
        np.testing.assert_array_equal(minus, np.full(4, -np.inf, np.float32), err_msg=backend)
        np.testing.assert_array_equal(plus, np.full(4, np.inf, np.float32), err_msg=backend)


def test_constants_compare_dtype_shape_and_bytes() -> None:
    g = tg.Graph()
    x = g.input("x", (4,), tg.float32)
    zeros = np.zeros(4, np.float32)
    # -0.0 has the sign bit set (bytes 00 00 00 80); int32 zeros have float32 zeros' bytes;
    # a (2, 2) reshape of the same bytes has another shape.
    minus = g.constant(np.full(4, -0.0, np.float32))
    same_bytes_other_dtype = g.constant(np.zeros(4, np.int32)).astype(tg.float32)
    other_shape = g.constant(zeros.reshape(2, 2)).reshape((4,))
    g.output(x + g.constant(zeros), x + minus, x + same_bytes_other_dtype, x + other_shape)
    g.output(x + g.constant(zeros))  # the only real duplicate
    result = cse(g)
    assert count(result.graph, "constant") == 4
    assert result.stats["merged"] == 2, "the duplicate constant and the add that reads it"


def test_an_int_a_float_and_a_bool_attribute_never_merge() -> None:
    # 1 == 1.0 == True in Python; full(1), full(1.0) and full(True) are three attributes.
    g = tg.Graph()
    x = g.input("x", (3,), tg.float32)
    for value in (1, 1.0, True, 1.0):
        g.output(x * tg.full(g, (3,), value, dtype=tg.float32))
    result = cse(g)
    assert count(result.graph, "full") == 3 and result.stats["merged"] == 2


def nan(payload: int, negative: bool = False) -> float:
    """The double NaN with this mantissa payload (exponent all ones, payload != 0)."""
    bits = (negative << 63) | (0x7FF << 52) | payload
    return struct.unpack("<d", struct.pack("<Q", bits))[0]


def same_bits(a: object, b: object) -> bool:
    """The test's own oracle: same Python type and, for floats, the same 64 bits."""
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        return len(a) == len(b) and all(same_bits(p, q) for p, q in zip(a, b, strict=True))
    if isinstance(a, float):
        return np.float64(a).view(np.uint64) == np.float64(b).view(np.uint64)
    return a == b


# Few distinct values, so that hypothesis often draws equal and ==-but-different pairs.
SCALARS = st.one_of(
    st.booleans(),
    st.integers(-1, 2),
    st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.0, math.inf, -math.inf]),
    st.builds(nan, st.sampled_from([1, 2, 1 << 51]), st.booleans()),
)
NESTED = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3).map(tuple), max_leaves=6)


@given(SCALARS, SCALARS)
def test_cse_merges_full_exactly_when_the_value_bits_agree(a: object, b: object) -> None:
    g = tg.Graph()
    x = g.input("x", (2,), tg.float32)
    g.output(x + tg.full(g, (2,), a, dtype=tg.float32), x + tg.full(g, (2,), b, dtype=tg.float32))
    result = cse(g)
    # Equal values merge the full and the add that reads it; otherwise nothing merges.
    assert result.stats["merged"] == (2 if same_bits(a, b) else 0)
    assert count(result.graph, "full") == (1 if same_bits(a, b) else 2)


@given(NESTED, NESTED)
def test_exact_key_is_equal_exactly_for_bit_identical_values(a: object, b: object) -> None:
    assert (exact_key(a) == exact_key(b)) == same_bits(a, b)
    assert exact_key(a) == exact_key(copy.deepcopy(a)), "a value always matches itself"
    hash(exact_key(a))


def test_exact_key_compares_arrays_by_dtype_shape_and_bytes() -> None:
    zeros = np.zeros(4, np.float32)
    assert exact_key(zeros) == exact_key(np.zeros(4, np.float32))
    assert exact_key(zeros) != exact_key(np.full(4, -0.0, np.float32)), "sign bit"
    assert exact_key(zeros) != exact_key(np.zeros(4, np.int32)), "same bytes, other dtype"
    assert exact_key(zeros) != exact_key(zeros.reshape(2, 2)), "same bytes, other shape"
    assert exact_key(np.float32(0.0)) != exact_key(np.float32(-0.0))
    assert exact_key(np.float32(nan(1))) == exact_key(np.float32(nan(1)))
    assert exact_key(b"\x00\x00\x00\x80") != exact_key(b"\x00\x00\x00\x00")


# Two values per registry attribute kind that Python's == calls equal (or that a sloppy
# key could confuse) but that are different attribute values.
EQUAL_BUT_DIFFERENT = {
    "int": (1, True),
    "ints": ((0, 1), (0.0, 1.0)),
    "extent": (1, True),
    "extents": ((0, 1), (0.0, 1.0)),
    "bound": (0.0, -0.0),
    "float": (0.0, -0.0),
    "scalar": (1, 1.0),
    "bool": (True, 1),
    "str": ("float32", b"float32"),
    "dtype": ("int32", "int32 "),
    "bytes": (b"\x00\x00\x00\x80", b"\x00\x00\x00\x00"),
}


def test_every_attribute_kind_of_the_registry_is_compared_exactly() -> None:
    kinds = {spec.kind for op in OPS.values() for spec in op.attrs.values()}
    assert kinds <= set(EQUAL_BUT_DIFFERENT), (
        f"new attribute kinds {kinds - set(EQUAL_BUT_DIFFERENT)}"
    )
    for kind, (a, b) in EQUAL_BUT_DIFFERENT.items():
        assert exact_key(a) != exact_key(b), kind
        assert exact_key(a) == exact_key(copy.deepcopy(a)), kind


def test_a_fill_an_update_writes_into_is_never_shared() -> None:
    """Two zero fills each written by a slice_update stay two (each update then writes
    over its own fill in place); two equal fills only added to still merge. Shared, the
    first update would copy the fill (the second still reads it) and the fill would be
    held from the first update to the second."""
    g = tg.Graph("fills")
    a, b = g.input("a", (2, 3)), g.input("b", (2, 3))
    first = tg.slice_update(tg.zeros(g, (4, 3)), a, 0, 0)
    second = tg.slice_update(tg.zeros(g, (4, 3)), b, 0, 2)
    plain = tg.zeros(g, (4, 3)) + 1.0
    g.output(first * second + (tg.zeros(g, (4, 3)) + plain))
    merged = cse(g).graph
    fills = [n for n in merged.nodes if n.op == "full"]
    updated = {n.inputs[0] for n in merged.nodes if n.op == "slice_update"}
    assert len(updated) == 2 and updated <= {n.id for n in fills}
    assert len(fills) == 3  # the two written into, and one for both plain reads
    prog = tg.compile(g)
    kinds = [prog.aliasing.of(n.id) for n in prog.graph.nodes if n.op == "slice_update"]
    assert all(alias is not None and alias.kind == "inplace" for alias in kinds)
    feeds = {"a": np.ones((2, 3), np.float32), "b": np.full((2, 3), 2.0, np.float32)}
    want = np.zeros((4, 3), np.float32) + 1.0  # first * second is zero in every row
    for backend in ("numpy", "arena", "mlx"):
        np.testing.assert_array_equal(prog.run(feeds, backend=backend)[0], want)
