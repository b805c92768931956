"""Symbolic dimensions: `Dim`, a named positive integer with a range, and the extents
built from dims that shapes and shape attributes hold.

An *extent* (one entry of a shape, or a size-like attribute: a reshape target, a narrow
start, an arange bound) is a Python int or a sympy expression of `Dim`s that is an
integer for every value of its dims: sums, products, floor division and remainders by
constants (`seq // 2` is `floor(seq/2)`). Canonical form (`canonical`): an expression
that evaluates to a number is that int; any other is `sympy.expand`ed, so extents equal
by expansion are equal values, hash alike and make equal nodes. Shapes without a Dim
stay tuples of ints: every function here takes an int fast path first.

Decisions follow the "statically known true" rule (torch's `statically_known_true`):
`always(a, relation, b)` is True only when the relation holds for every value of the
dims in their ranges, False when it holds for none of them, None when the ranges do not
decide it. Inference turns None into a GraphError (`undecided`) naming the condition and
the ranges; nothing is assumed.

Ranges (`dim_range`) are exact whenever the dims of an expression take at most 2**20
value combinations together (a length up to 2048 and a second dim up to 512, say): the
expression is evaluated at every one of them, vectorised by NumPy, which decides
`seq - seq // 2 - 1 >= 0` where intervals cannot. Larger ranges fall back to interval
arithmetic over the expression tree (sums, products, integer powers, floor, ceiling, Mod
by a constant, Max, Min): sound (every value lies in the interval) and exact when each
dim occurs once, since each bound is then reached at an end of the dims' ranges; with a
repeated dim (`seq*seq - seq`) the interval may be wider, so a decision can only be
conservative (None where the exact range would say True), never wrong.

Text form (`to_text`, `from_text`): sympy's printed form, parsed back by sympy after a
token check that admits only integers, operators, the graph's dim names and the five
functions above, so parsing a file evaluates nothing else.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable, Mapping
from fractions import Fraction
from functools import lru_cache

import numpy as np
import sympy
from sympy.core.cache import cacheit
from sympy.parsing.sympy_parser import auto_number, parse_expr

from tensorgraph.errors import GraphError

Extent = int | sympy.Expr

_FUNCTIONS = {
    "floor": sympy.floor,
    "ceiling": sympy.ceiling,
    "Mod": sympy.Mod,
    "Max": sympy.Max,
    "Min": sympy.Min,
}
_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(\*\*|[-+*/(),]))")


class Dim(sympy.Symbol):
    """A symbolic dimension: a positive integer `name` whose value lies in [min, max].

    A sympy Symbol (integer, positive), so `seq + 1`, `2 * seq`, `seq // 4` are extents.
    Two Dims are the same symbol when name, min and max are all equal. GraphError when
    the name is not an identifier (or is a function name of the text form), a bound is
    not an int, min < 1, min > max, or max is missing (a plan needs an upper bound)."""

    __slots__ = ("max", "min")

    def __new__(cls, name: str, min: int = 1, max: int | None = None) -> Dim:
        if not isinstance(name, str) or not name.isidentifier() or name in _FUNCTIONS:
            raise GraphError(f"Dim name must be an identifier but got {name!r}")
        if max is None:
            raise GraphError(f"Dim {name!r} needs an upper bound: Dim({name!r}, min, max)")
        bounds = []
        for what, bound in (("min", min), ("max", max)):
            try:
                if isinstance(bound, bool):
                    raise TypeError
                bounds.append(operator.index(bound))
            except TypeError:
                raise GraphError(f"Dim {name!r}: {what} must be an int but got {bound!r}") from None
        low, high = bounds
        if low < 1:
            raise GraphError(f"Dim {name!r}: min must be at least 1 but got {low}")
        if low > high:
            raise GraphError(f"Dim {name!r}: min {low} is greater than max {high}")
        return Dim.__xnew__(cls, name, low, high)

    @staticmethod
    @cacheit
    def __xnew__(cls: type, name: str, low: int, high: int) -> Dim:
        obj = sympy.Symbol.__xnew__(cls, name, integer=True, positive=True)
        obj.min = low
        obj.max = high
        return obj

    def __getnewargs_ex__(self) -> tuple[tuple[str, int, int], dict]:
        return (self.name, self.min, self.max), {}

    def _hashable_content(self) -> tuple:
        return (*super()._hashable_content(), self.min, self.max)

    def describe(self) -> str:
        """`seq in [1, 2048]`: how messages state a dim's range."""
        return f"{self.name} in [{self.min}, {self.max}]"


# ---------------------------------------------------------------- extents


def is_static(value: object) -> bool:
    """True for a plain int extent (no Dim in it)."""
    return type(value) is int


def canonical(value: object) -> Extent:
    """The canonical extent of `value` (an int, or an expression already known to be an
    integer extent): ints as they are, numbers as ints, other expressions expanded."""
    if type(value) is int:
        return value
    expanded = sympy.expand(value)
    if expanded.is_Integer:
        return int(expanded)
    return expanded


def canonical_shape(shape: Iterable[object]) -> tuple[Extent, ...]:
    """Every entry of `shape` canonical (see `canonical`)."""
    return tuple(d if type(d) is int else canonical(d) for d in shape)


def as_extent(value: object, what: str = "extent") -> Extent:
    """`value` given by a user (an int, a NumPy integer, a Dim or an expression of Dims)
    as a canonical extent; GraphError naming `what` for anything else: a float, a bool,
    a symbol that is not a Dim, or an expression not an integer for every value
    (`seq / 2`: write `seq // 2`)."""
    if type(value) is int:
        return value
    if isinstance(value, sympy.Basic):
        if not isinstance(value, sympy.Expr) or not all(
            isinstance(s, Dim) for s in value.free_symbols
        ):
            raise GraphError(f"{what}: {value} is not an expression of tg.Dim dimensions")
        result = canonical(value)
        if not is_static(result) and result.is_integer is not True:
            raise GraphError(
                f"{what}: {value} is not an integer for every {ranges_text(value)} "
                "(use // for floor division)"
            )
        return result
    if isinstance(value, bool):
        raise GraphError(f"{what}: expected an int or a tg.Dim expression but got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise GraphError(
            f"{what}: expected an int or a tg.Dim expression but got {value!r}"
        ) from None


def extent_or_int(value: object, what: str = "extent") -> Extent:
    """A builder's size argument: a sympy value through `as_extent`, anything else
    through `int` (what the builders always did with plain numbers)."""
    return as_extent(value, what) if isinstance(value, sympy.Basic) else int(value)


def dims_in(*values: object) -> set[Dim]:
    """The Dims in `values` (extents, or tuples of them, nested), for any mix of types:
    other values hold none."""
    found: set[Dim] = set()
    for value in values:
        if type(value) is int:
            continue
        if isinstance(value, sympy.Basic):
            found.update(s for s in value.free_symbols if isinstance(s, Dim))
        elif type(value) is tuple:
            found.update(dims_in(*value))
    return found


def ranges_text(*values: object) -> str:
    """`seq in [1, 2048], kv in [1, 64]`: the ranges of the dims in `values`, by name."""
    return ", ".join(d.describe() for d in sorted(dims_in(*values), key=lambda d: d.name))


# ---------------------------------------------------------------- ranges and decisions


def _number(value: sympy.Expr) -> Fraction:
    if value.is_Integer:
        return Fraction(int(value))
    if value.is_Rational:
        return Fraction(int(value.p), int(value.q))
    raise GraphError(f"extent constant {value} is not rational")


def _product(a: tuple[Fraction, Fraction], b: tuple[Fraction, Fraction]) -> tuple:
    corners = [x * y for x in a for y in b]
    return min(corners), max(corners)


def _interval(expr: sympy.Expr) -> tuple[Fraction, Fraction]:
    """An interval holding every value of `expr` (interval arithmetic, see module doc)."""
    if isinstance(expr, Dim):
        return Fraction(expr.min), Fraction(expr.max)
    if expr.is_Number:
        value = _number(expr)
        return value, value
    parts = [_interval(arg) for arg in expr.args]
    if expr.is_Add:
        return sum(p[0] for p in parts), sum(p[1] for p in parts)
    if expr.is_Mul:
        result = parts[0]
        for part in parts[1:]:
            result = _product(result, part)
        return result
    if expr.is_Pow and expr.exp.is_Integer and expr.exp > 0:
        (low, high), n = parts[0], int(expr.exp)
        ends = (low**n, high**n)
        if n % 2 == 0 and low < 0 < high:
            return Fraction(0), max(ends)
        return min(ends), max(ends)
    if isinstance(expr, sympy.floor | sympy.ceiling):
        rounding = sympy.floor if isinstance(expr, sympy.floor) else sympy.ceiling
        (low, high) = parts[0]
        return Fraction(int(rounding(low))), Fraction(int(rounding(high)))
    if isinstance(expr, sympy.Mod) and expr.args[1].is_Integer and expr.args[1] > 0:
        (low, high), modulus = parts[0], int(expr.args[1])
        if low >= 0 and high < modulus:
            return low, high
        return Fraction(0), Fraction(modulus - 1)
    if isinstance(expr, sympy.Max | sympy.Min):
        pick = max if isinstance(expr, sympy.Max) else min
        return pick(p[0] for p in parts), pick(p[1] for p in parts)
    raise GraphError(f"extent {expr} uses {type(expr).__name__}, which has no range rule")


EXHAUSTIVE = 1 << 20  # the most value combinations `dim_range` evaluates one by one


def interval_range(expr: sympy.Expr) -> tuple[int, int]:
    """The integer bounds of `expr`'s interval (interval arithmetic, see the module
    docstring): sound for any range, exact when each dim occurs once."""
    low, high = _interval(expr)
    return -((-low.numerator) // low.denominator), high.numerator // high.denominator


@lru_cache(maxsize=4096)
def _range(expr: sympy.Expr) -> tuple[int, int]:
    dims = sorted(dims_in(expr), key=lambda d: d.name)
    points = 1
    for d in dims:
        points *= d.max - d.min + 1
    if not dims or points > EXHAUSTIVE:
        return interval_range(expr)
    grids = np.meshgrid(
        *(np.arange(d.min, d.max + 1, dtype=np.int64) for d in dims), indexing="ij", sparse=True
    )
    values = np.asarray(sympy.lambdify(dims, expr, "numpy")(*grids))
    return int(np.min(values)), int(np.max(values))


def dim_range(value: Extent) -> tuple[int, int]:
    """(lo, hi): every value of extent `value` over its dims' ranges lies in [lo, hi]
    (interval arithmetic: exact when each dim occurs once, see the module docstring)."""
    if type(value) is int:
        return value, value
    return _range(sympy.sympify(value))


def always(a: Extent, relation: str, b: Extent) -> bool | None:
    """Whether `a relation b` holds for every value of the dims (True), for none (False),
    or depends on them (None). `relation` is one of ==, !=, <, <=, >, >=. Equal by
    expansion is equal; otherwise the range of b - a decides."""
    if type(a) is int and type(b) is int:
        return _RELATIONS[relation](a, b)
    if relation == "!=":
        same = always(a, "==", b)
        return None if same is None else not same
    if relation in (">", ">="):
        return always(b, "<" if relation == ">" else "<=", a)
    difference = canonical(sympy.sympify(b) - a)
    low, high = dim_range(difference)
    if relation == "==":
        if low == high == 0:
            return True
        return False if low > 0 or high < 0 else None
    strict = relation == "<"
    if low > 0 or (low == 0 and not strict):
        return True
    if high < 0 or (high == 0 and strict):
        return False
    return None


_RELATIONS = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


def undecided(condition: str, *values: object) -> GraphError:
    """The GraphError for a condition the ranges do not decide: `condition does not
    hold for every seq in [1, 2048]` (the ranges of the dims in `values`)."""
    return GraphError(f"{condition} does not hold for every {ranges_text(*values)}")


def require(a: Extent, relation: str, b: Extent, error: Exception, context: str = "") -> None:
    """Raise `error` when `a relation b` fails for every value, `undecided` naming the
    relation (after `context`, when given) when it holds only for some; return when it
    always holds."""
    holds = always(a, relation, b)
    if holds is None:
        raise undecided(f"{context}{': ' if context else ''}{a} {relation} {b}", a, b)
    if not holds:
        raise error


# ---------------------------------------------------------------- values and text


def evaluate(value: object, values: Mapping[Dim, int]) -> object:
    """`value` (an extent, a tuple of them nested, or any other attribute) with each Dim
    in `values` replaced by its int: a fully bound extent becomes an int."""
    if type(value) is int:
        return value
    if isinstance(value, sympy.Basic):
        result = value.xreplace({d: sympy.Integer(v) for d, v in values.items()})
        return canonical(result)
    if type(value) is tuple:
        return tuple(evaluate(v, values) for v in value)
    return value


def to_text(value: sympy.Expr) -> str:
    """The text form of an extent expression (see the module docstring)."""
    return str(value)


def from_text(text: str, dims: Mapping[str, Dim]) -> Extent:
    """The canonical extent `to_text` wrote, with names read as the Dims of `dims`;
    GraphError naming the text when it holds any other name or token."""
    if not isinstance(text, str):
        raise GraphError(f"an extent must be a text but got {text!r:.60}")
    position = 0
    while position < len(text.rstrip()):
        match = _TOKEN.match(text, position)
        if match is None:
            raise GraphError(f"extent {text!r}: unexpected text at {text[position:]!r:.20}")
        name = match.group(2)
        if name is not None and name not in dims and name not in _FUNCTIONS:
            raise GraphError(f"extent {text!r}: {name!r} is not a dim of this graph")
        position = match.end()
    try:
        parsed = parse_expr(
            text,
            local_dict=dict(dims),
            global_dict={"Integer": sympy.Integer, **_FUNCTIONS},
            transformations=(auto_number,),
        )
    except (SyntaxError, TypeError, ValueError) as err:
        raise GraphError(f"extent {text!r} does not parse: {err}") from err
    return as_extent(parsed, f"extent {text!r}")
