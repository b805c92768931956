"""torch.export's dynamic dimensions as tensorgraph Dims, and its size arithmetic as
extents of them.

A program exported with `dynamic_shapes` carries each dynamic input dimension as a
backed SymInt symbol (`s0`, `s27`, ...) whose range is in `program.range_constraints`.
`torch_dims(program)` makes one `tg.Dim` per such symbol: named after the user's
`torch.export.Dim` (the shape env's `source_name_to_debug_name`, keyed by the source
of the symbol, e.g. `L['x'].size()[1]` -> "seq"), else after the symbol itself, with
torch's range; a lower bound of 0 becomes 1 (a Dim is a positive length; torch
specialises 0 and 1 apart anyway). A symbol whose range has no upper bound (torch's
default `max` is int_oo) gets no Dim: it is a problem for the import to list, since a
plan needs an upper bound. Unbacked symbols (`u0`, a size that depends on the data)
get none either and stay "dynamic or data-dependent" problems.

While an import runs, `active(dims)` makes the mapping current: `to_extent` turns a
SymInt (or a sympy expression of torch's symbols, FloorDiv and Mod included) into the
canonical extent of the Dims (`ir.dims.canonical`), and `size_value` computes the FX
nodes of size arithmetic (`aten.sym_size.int`, `operator.mul`/`add`/`sub`/`floordiv`/
`mod`/`neg`) on extents, so every shape argument (view, expand, arange, full, slice)
reaches the handlers as the extent the IR takes. An expression with a symbol outside
the mapping has no extent (`to_extent` gives None): the caller reports it.
"""

from __future__ import annotations

import contextlib
import contextvars
import operator
from collections.abc import Iterator, Mapping

import sympy

from tensorgraph.ir import api as tg
from tensorgraph.ir.dims import Dim, canonical
from tensorgraph.ir.tensor import Tensor

try:
    import torch
    from torch.utils._sympy import functions as torch_functions
except ImportError as err:  # pragma: no cover - exercised only without torch
    raise ImportError(
        "tensorgraph.importers.sym_sizes needs torch: pip install 'tensorgraph[torch]'"
    ) from err

__all__ = [
    "SIZE_OPS",
    "active",
    "as_operand",
    "is_size_op",
    "size_value",
    "to_extent",
    "torch_dims",
]

_DIMS: contextvars.ContextVar[Mapping[sympy.Symbol, Dim] | None] = contextvars.ContextVar(
    "tensorgraph_import_dims", default=None
)

# Size arithmetic on SymInts as FX records it (Python's operators on ints; floordiv and
# mod are Python's floor semantics, which sympy's floor and Mod share for a positive
# divisor).
SIZE_OPS = {
    operator.mul: operator.mul,
    operator.add: operator.add,
    operator.sub: operator.sub,
    operator.floordiv: lambda a, b: sympy.floor(sympy.sympify(a) / b),
    operator.mod: sympy.Mod,
    operator.neg: operator.neg,
}


def torch_dims(program: torch.export.ExportedProgram) -> tuple[dict[sympy.Symbol, Dim], list[str]]:
    """The Dim of each backed symbol of `program` (see the module docstring), and the
    problems of the symbols that cannot be one (no upper bound), each naming the symbol,
    the user's Dim name and what to give."""
    names = _debug_names(program)
    dims: dict[sympy.Symbol, Dim] = {}
    problems: list[str] = []
    for symbol, bounds in program.range_constraints.items():
        if not str(symbol).startswith("s"):
            continue  # unbacked (u0: data-dependent) or derived: not an input dimension
        name = names.get(symbol, str(symbol))
        upper = bounds.upper
        if not isinstance(upper, int) and not getattr(upper, "is_Integer", False):
            problems.append(
                f"dynamic dim {name!r} ({symbol}) has no upper bound; tensorgraph plans up "
                f"to one: give torch.export.Dim({name!r}, min=..., max=...)"
            )
            continue
        low = max(int(bounds.lower), 1)
        dims[symbol] = Dim(name if name.isidentifier() else str(symbol), low, int(upper))
    return dims, problems


def _debug_names(program: torch.export.ExportedProgram) -> dict[sympy.Symbol, str]:
    """symbol -> the user's torch.export.Dim name, where the shape env kept it."""
    for node in program.graph.nodes:
        value = node.meta.get("val") if node.op == "placeholder" else None
        mode = getattr(value, "fake_mode", None)
        env = getattr(mode, "shape_env", None)
        if env is None:
            continue
        debug = getattr(env, "source_name_to_debug_name", {})
        names: dict[sympy.Symbol, str] = {}
        for symbol, sources in getattr(env, "var_to_sources", {}).items():
            for source in sources:
                if source.name in debug or _source_name(source) in debug:
                    names[symbol] = debug.get(source.name) or debug[_source_name(source)]
                    break
        return names
    return {}


def _source_name(source: object) -> str:
    name = source.name
    return name() if callable(name) else name


@contextlib.contextmanager
def active(dims: Mapping[sympy.Symbol, Dim]) -> Iterator[None]:
    """Make `dims` the mapping `to_extent` uses while the block runs."""
    token = _DIMS.set(dims)
    try:
        yield
    finally:
        _DIMS.reset(token)


def to_extent(value: object) -> object:
    """The extent of an int, SymInt or torch sympy expression under the active mapping;
    None when it uses a symbol the mapping lacks (unbacked, unbounded)."""
    if isinstance(value, int):
        return value
    if isinstance(value, torch.SymInt):
        hint = value.node.maybe_as_int()
        if hint is not None:
            return int(hint)
        value = value.node.expr
    if not isinstance(value, sympy.Expr):
        return None
    try:
        return canonical(_convert(value, _DIMS.get() or {}))
    except KeyError:
        return None


def _convert(expr: sympy.Expr, dims: Mapping[sympy.Symbol, Dim]) -> sympy.Expr:
    """`expr` over the Dims: torch's integer functions as sympy's (KeyError: a symbol
    or function without a counterpart)."""
    if expr.is_Integer:
        return sympy.Integer(int(expr))
    if expr.is_Symbol:
        return dims[expr]
    args = [_convert(a, dims) for a in expr.args]
    if isinstance(expr, torch_functions.FloorDiv):
        return sympy.floor(args[0] / args[1])
    if isinstance(expr, torch_functions.CleanDiv):
        return args[0] / args[1]
    if isinstance(expr, torch_functions.Mod | torch_functions.PythonMod | sympy.Mod):
        return sympy.Mod(args[0], args[1])
    if expr.is_Add:
        return sympy.Add(*args)
    if expr.is_Mul:
        return sympy.Mul(*args)
    if expr.is_Pow and expr.args[1].is_Integer and int(expr.args[1]) >= 0:
        return args[0] ** int(expr.args[1])
    if isinstance(expr, sympy.Max | torch_functions.Max):
        return sympy.Max(*args)
    if isinstance(expr, sympy.Min | torch_functions.Min):
        return sympy.Min(*args)
    raise KeyError(type(expr).__name__)


def is_size_op(target: object) -> bool:
    """True for the FX targets `size_value` computes."""
    return target in SIZE_OPS or target is torch.ops.aten.sym_size.int


def size_value(target: object, args: tuple) -> object:
    """The extent an FX size node computes from its (already mapped) arguments: a
    tensor's extent for `aten.sym_size.int`, arithmetic on extents otherwise."""
    if target is torch.ops.aten.sym_size.int:
        tensor, axis = args
        return tensor.shape[axis]
    return canonical(SIZE_OPS[target](*args))


def as_operand(like: Tensor, extent: object) -> object:
    """`extent` as an operand of an op on `like` (an index + size, a stride * index): an
    int as it is, an expression of Dims as an int64 scalar tensor holding its value at
    run time (`arange(e, e + 1)`, the one op whose value is an extent)."""
    if isinstance(extent, int):
        return extent
    value = tg.arange(like.graph, extent, extent + 1, dtype=tg.int64)
    return value.reshape(())
