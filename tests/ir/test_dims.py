"""`tg.Dim` and extents: validation, ranges (exact by evaluation over small ranges; by
interval arithmetic otherwise: sound, and exact when each dim occurs once), the
"statically known" decisions, text round trips and safe parsing. Brute force over the
whole (small) ranges is the oracle, written here with sympy's own substitution."""

from __future__ import annotations

import itertools
import pickle

import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.ir.dims import (
    EXHAUSTIVE,
    always,
    as_extent,
    dim_range,
    from_text,
    interval_range,
    to_text,
)

SEQ = tg.Dim("seq", min=2, max=9)
KV = tg.Dim("kv", min=1, max=6)


def _values(expr: object) -> list[int]:
    """Every value `expr` takes over the whole ranges of SEQ and KV."""
    return [
        int(sympy.sympify(expr).xreplace({SEQ: s, KV: k}))
        for s, k in itertools.product(range(SEQ.min, SEQ.max + 1), range(KV.min, KV.max + 1))
    ]


@st.composite
def extents(draw: st.DrawFn, depth: int = 3) -> object:
    """Integer expressions of SEQ and KV: sums, products, floor division and remainders by
    constants, Max and Min, of dims and small constants."""
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from((SEQ, KV)) | st.integers(-4, 6).map(sympy.Integer))
    a, b = draw(extents(depth - 1)), draw(extents(depth - 1))
    k = draw(st.integers(1, 4))
    return draw(
        st.sampled_from(
            (a + b, a - b, a * b, a // k, a % k, sympy.Max(a, b), sympy.Min(a, b), k * a)
        )
    )


@given(extents())
def test_the_range_over_small_dims_is_exact_and_the_interval_holds_it(expr: object) -> None:
    values = _values(expr)
    assert dim_range(as_extent(expr)) == (min(values), max(values))
    if not isinstance(as_extent(expr), int):
        low, high = interval_range(sympy.sympify(as_extent(expr)))
        assert low <= min(values) and max(values) <= high


def test_past_the_exhaustive_limit_the_range_is_the_sound_interval() -> None:
    big = tg.Dim("big", min=1, max=EXHAUSTIVE + 1)
    half = big - big // 2 - 1  # >= 0 for every value; big occurs twice
    assert dim_range(half) == interval_range(half) == (-((EXHAUSTIVE + 1) // 2), EXHAUSTIVE)
    assert always(half, ">=", 0) is None  # conservative, never wrong
    small = tg.Dim("small", min=1, max=2048)
    assert always(small - small // 2 - 1, ">=", 0) is True  # exact: evaluated everywhere


@given(
    st.integers(-3, 3),
    st.integers(-3, 3),
    st.integers(-5, 5),
    st.integers(1, 4),
    st.sampled_from(("floor", "mod", "plain")),
)
def test_the_interval_is_exact_when_each_dim_occurs_once(
    a: int, b: int, c: int, k: int, wrap: str
) -> None:
    expr = a * SEQ + b * KV + c
    expr = {"floor": expr // k, "mod": expr % k, "plain": expr}[wrap]
    values = _values(expr)
    low, high = interval_range(sympy.sympify(as_extent(expr)))
    if wrap == "mod":  # a remainder's interval is [0, k - 1] unless its operand fits inside
        assert 0 <= low <= min(values) and max(values) <= high <= k - 1
    else:
        assert (low, high) == (min(values), max(values))


@given(extents(), extents(), st.sampled_from(("==", "!=", "<", "<=", ">", ">=")))
def test_always_is_true_only_when_the_relation_holds_for_every_value(
    a: object, b: object, relation: str
) -> None:
    import operator

    compare = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le}
    compare |= {">": operator.gt, ">=": operator.ge}
    a, b = as_extent(a), as_extent(b)
    held = [compare[relation](x, y) for x, y in zip(_values(a), _values(b), strict=True)]
    verdict = always(a, relation, b)
    if verdict is True:
        assert all(held)
    elif verdict is False:
        assert not any(held)


def test_always_decides_equal_expressions_and_ranges() -> None:
    assert always(2 * SEQ, "==", SEQ + SEQ) is True
    assert always((SEQ + 1) * KV, "==", SEQ * KV + KV) is True
    assert always(SEQ, "<=", 9) is True and always(SEQ, "<", 2) is False
    assert always(SEQ, "==", 4) is None and always(SEQ, "==", KV) is None
    assert always(SEQ + 10, "==", KV) is False  # ranges [12, 19] and [1, 6]
    assert always(3, "<", 4) is True  # ints compare as ints


@given(extents())
def test_text_round_trips_every_extent(expr: object) -> None:
    value = as_extent(expr)
    text = to_text(sympy.sympify(value))
    assert from_text(text, {"seq": SEQ, "kv": KV}) == value


@pytest.mark.parametrize(
    "text",
    ["__import__('os')", "seq.__class__", "n + 1", "seq; 1", "lambda: 1", "seq[0]", "1e9"],
)
def test_parsing_admits_only_the_dims_numbers_and_five_functions(text: str) -> None:
    with pytest.raises(tg.GraphError, match=r"extent"):
        from_text(text, {"seq": SEQ})


def test_a_dim_is_a_sympy_symbol_identified_by_name_and_range() -> None:
    assert tg.Dim("seq", min=2, max=9) is SEQ
    assert tg.Dim("seq", min=2, max=10) != SEQ
    assert pickle.loads(pickle.dumps(SEQ)) == SEQ
    assert (SEQ.min, SEQ.max, SEQ.describe()) == (2, 9, "seq in [2, 9]")
    assert tg.Dim("n", 1, 1).max == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("seq", 3, 2), r"min 3 is greater than max 2"),
        (("seq", 0, 4), r"min must be at least 1 but got 0"),
        (("seq", -2, 4), r"min must be at least 1 but got -2"),
        (("seq", 1.5, 4), r"min must be an int but got 1.5"),
        (("seq", 1, "8"), r"max must be an int but got '8'"),
        (("seq", True, 8), r"min must be an int but got True"),
        (("seq", 1), r"needs an upper bound"),
        (("2seq", 1, 4), r"must be an identifier"),
        (("floor", 1, 4), r"must be an identifier"),
    ],
)
def test_bad_dims_are_graph_errors(args: tuple, message: str) -> None:
    with pytest.raises(tg.GraphError, match=message):
        tg.Dim(*args)


def test_a_static_graph_is_unchanged() -> None:
    g = tg.Graph("static")
    x = g.input("x", (2, 3))
    g.output(x.reshape(-1) + 1.0)
    assert g.dims == {} and all(type(d) is int for n in g.nodes for d in n.shape)
    assert '"dims"' not in g.to_json()  # the static text format is unchanged
