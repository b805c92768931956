"""Import a PyTorch module as a tensorgraph graph (weights become bound params).

`from_torch(module, example_inputs)` runs three steps, and a failure in any of them is a
GraphError that names the step:
1. export: `torch.export.export` (torch's own error is kept as the cause), with the
   modules it cannot trace (Switch Transformers' experts and router) swapped for the
   stand-ins of `importers.stand_ins` while it runs;
2. decompositions: `ExportedProgram.run_decompositions(decomposition_table())`, torch's
   Core ATen table minus the composite ops tensorgraph has fused ops for (attention and
   the normalisations), which stay whole; this also functionalises the program, so no
   in-place op (relu_, add_, ...) reaches the importer;
3. import: every node of the decomposed graph goes through one handler (the `ATEN` table
   of `importers.aten*`), emitting what the export says and nothing cleverer.

The import step never stops at the first problem: an op without a handler, arguments a
handler cannot map (each handler checks them first), or a handler whose result disagrees
with torch's shape or dtype for that node are all collected, the node then stands in as a
placeholder of torch's shape and dtype so later nodes are checked too, and one GraphError
lists every problem with its FX node name and the user's source line (the last frame of
the node's stack trace outside torch). A graph with problems is never returned.

A dynamic dimension of the export (a `torch.export.Dim` in `dynamic_shapes`, with a max)
becomes a `tg.Dim`, and the size arithmetic on it extents of that Dim
(`importers.sym_sizes`); one without a max is a problem, listed with the rest.

Parameters, buffers (persistent or not, e.g. a rotary `inv_freq`) and lifted constants
become params bound to their values; user inputs become inputs named after the export's
placeholders. A buffer the program mutates (its BUFFER_MUTATION outputs: a static KV
cache, see importers.generation) becomes a state named after the buffer (`g.state`), and
the mutation's value its update (`g.update_state`), so one call's write is the next
call's read; such a buffer must hold zeros (a state starts so), and any other mutation
(of a user input, of a parameter) is a problem. Computations on weights alone are then
folded into params (`passes.fold`), as ExecuTorch's constant propagation does. Needs the
`torch` extra.

A tied weight (one tensor under several names: an LM head tied to the token embedding)
is one param, named by torch's first name for it and read by every use
(`_Importer.param`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection

import ml_dtypes
import numpy as np

from tensorgraph.errors import GraphError, TensorGraphError
from tensorgraph.importers.fused_norms import fuse_rms_norms
from tensorgraph.ir import api as tg
from tensorgraph.passes.fold import fold_weights

try:
    import torch
except ImportError as err:  # pragma: no cover - exercised only without torch
    raise ImportError(
        "tensorgraph.importers.torch_export needs torch: pip install 'tensorgraph[torch]'"
    ) from err

# The handler tables need torch too: imported once the check above has passed. Importing
# a handler module registers its handlers in ATEN.
from tensorgraph.importers import aten_fused as _aten_fused  # noqa: F401
from tensorgraph.importers import aten_index as _aten_index  # noqa: F401
from tensorgraph.importers import aten_math as _aten_math  # noqa: F401
from tensorgraph.importers import aten_moe as _aten_moe  # noqa: F401
from tensorgraph.importers import aten_nn as _aten_nn  # noqa: F401
from tensorgraph.importers import aten_state as _aten_state  # noqa: F401
from tensorgraph.importers.aten import (
    ATEN,
    DTYPES,
    Context,
    Handler,
    Unsupported,
    handles,
    op_name,
    shape_problem,
    static_shape,
    to_dtype,
)
from tensorgraph.importers.stand_ins import stand_ins
from tensorgraph.importers.sym_sizes import active, is_size_op, size_value, torch_dims

__all__ = [
    "ATEN",
    "DTYPES",
    "FUSED_COMPOSITES",
    "Context",
    "Handler",
    "Unsupported",
    "decomposition_table",
    "from_exported",
    "from_torch",
    "handles",
    "to_dtype",
]

# Composite ops kept whole when tensorgraph has a handler for them (a fused IR op).
FUSED_COMPOSITES = (
    "scaled_dot_product_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention",
    "layer_norm",
    "native_layer_norm",
    "rms_norm",
    "_fused_rms_norm",
    "group_norm",
    "native_group_norm",
)
# Nodes that carry no computation: shape/dtype assertions the export inserts, and the
# value checks of decompositions (one_hot's `_assert_async`: indices within the classes).
_DROPPED = (
    "_assert_tensor_metadata",
    "_assert_scalar",
    "_assert_async",
    "sym_constrain_range_for_size",
)
# Keyword arguments about placement only: every tensorgraph buffer is dense, row-major and
# on the backend's device, so these never change a value.
_PLACEMENT = ("device", "layout", "pin_memory", "memory_format", "non_blocking")


def decomposition_table() -> dict:
    """torch's Core ATen decomposition table without the composites of FUSED_COMPOSITES
    that have a handler in ATEN (those stay whole, to become fused IR ops)."""
    table = torch.export.default_decompositions()
    for op in list(table.keys()):
        name = op.name().split("::")[-1].split(".")[0]
        if name in FUSED_COMPOSITES and name in ATEN:
            table.pop(op)
    return table


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """`tensor` as a NumPy array of the same dtype and bits: bfloat16, which NumPy lacks,
    travels as its 16-bit patterns into ml_dtypes' bfloat16."""
    tensor = tensor.detach().cpu().contiguous()
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return tensor.numpy()


def from_torch(
    module: torch.nn.Module,
    example_inputs: tuple | torch.Tensor,
    name: str | None = None,
    dynamic_shapes: object = None,
) -> tg.Graph:
    """The graph of `module` exported on `example_inputs` (see the module docstring): a
    tuple (or list) of the forward's positional arguments, as torch.export takes them;
    a lone tensor is the one argument `(tensor,)`. `dynamic_shapes` goes to torch.export
    as it is: each `torch.export.Dim` in it becomes a `tg.Dim` of its name and range
    (`importers.sym_sizes`; one without `max` is a listed problem). GraphError naming
    the failing step (export, decompositions, import) otherwise, or naming the type of
    `example_inputs` when it is neither."""
    name = name or type(module).__name__.lower()
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    if not isinstance(example_inputs, tuple | list):
        raise GraphError(
            f"importing {name!r}: example_inputs must be a tuple of the forward's arguments "
            f"(or one tensor) but got {type(example_inputs).__name__}"
        )
    try:
        with stand_ins(module):
            program = torch.export.export(
                module, tuple(example_inputs), dynamic_shapes=dynamic_shapes
            )
    except Exception as err:
        raise GraphError(f"importing {name!r} failed at step 'export': {_first_line(err)}") from err
    return from_exported(program, name)


def from_exported(
    program: torch.export.ExportedProgram,
    name: str = "torch",
    decompose: bool = True,
    states: Collection[str] = (),
) -> tg.Graph:
    """The graph of an ExportedProgram: decomposed first (`decompose=False` imports it as
    it is, e.g. one already decomposed with `decomposition_table()`), then imported. The
    buffers named in `states` become states even where this program only reads them (a
    cache another entry of a multi-entry program writes), not params bound to their
    current value."""
    if decompose:
        try:
            program = program.run_decompositions(decomposition_table())
        except Exception as err:
            raise GraphError(
                f"importing {name!r} failed at step 'decompositions': {_first_line(err)}"
            ) from err
    dims, problems = torch_dims(program)
    with active(dims):
        return _Importer(program, name, frozenset(states), problems).run()


def _first_line(err: BaseException) -> str:
    text = str(err).strip() or type(err).__name__
    return f"{type(err).__name__}: {text.splitlines()[0]}"


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)')


def source_line(node: torch.fx.Node) -> str:
    """The user's source line of an FX node: the last frame of its stack trace that is not
    inside torch itself ("" when the export recorded no trace)."""
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    outside = [f for f in frames if "/torch/" not in f[0].replace("\\", "/")]
    if not outside:
        return ""
    path, line, function, code = outside[-1]
    return f"{path}:{line} in {function}: {code.strip()}"


class _Importer:
    """One import: maps FX nodes to Tensors, collecting every problem (see module doc)."""

    def __init__(
        self,
        program: torch.export.ExportedProgram,
        name: str,
        states: frozenset[str] = frozenset(),
        problems: list[str] | None = None,
    ) -> None:
        self.program = program
        self.name = name
        self.read_states = states
        self.graph = tg.Graph(name)
        self.ctx = Context(self.graph)
        self.problems: list[str] = list(problems or ())
        self.tensors = {**program.state_dict, **getattr(program, "constants", {})}
        self.params: dict[str, tg.Tensor] = {}  # bound params by canonical target

    def run(self) -> tg.Graph:
        values: dict[str, object] = {}
        signature = self.program.graph_signature
        specs = {spec.arg.name: spec for spec in signature.input_specs}
        mutations = [s for s in signature.output_specs if s.kind.name == "BUFFER_MUTATION"]
        mutated = {spec.target for spec in mutations}
        states: dict[str, tg.Tensor] = {}
        for node in self.program.graph.nodes:
            if node.op != "placeholder":
                continue
            spec = specs[node.name]
            meta = node.meta["val"]
            if meta.dtype not in DTYPES:
                values[node.name] = self.fail(node, f"{spec.kind.name.lower()} of {meta.dtype}")
                continue
            if shape_problem(meta):
                kind = spec.kind.name.lower()
                values[node.name] = self.fail(node, f"{kind}: {shape_problem(meta)}")
                continue
            shape, dtype = static_shape(meta), to_dtype(meta.dtype)
            if spec.kind.name == "USER_INPUT":
                values[node.name] = self.graph.input(node.name, shape, dtype)
            elif spec.target in mutated or (
                spec.kind.name == "BUFFER" and spec.target in self.read_states
            ):
                values[node.name] = states[spec.target] = self.state(node, spec.target)
            else:
                values[node.name] = self.param(spec.target, shape, dtype)
        outputs = self.run_graph(self.program.graph_module, values)
        results = {fx.name: value for fx, value in outputs if isinstance(fx, torch.fx.Node)}
        for spec in signature.output_specs:
            if spec.kind.name not in ("USER_OUTPUT", "BUFFER_MUTATION"):
                self.problems.append(
                    f"{spec.arg.name}: the program's {spec.kind.name.lower()} of "
                    f"{spec.target!r} (only buffers may be mutated: they become states)"
                )
        if self.problems:
            raise GraphError(
                f"importing {self.name!r} failed at step 'import': "
                f"{len(self.problems)} problem(s):\n  " + "\n  ".join(self.problems)
            )
        for spec in signature.output_specs:
            if spec.kind.name == "USER_OUTPUT":
                self.graph.output(results[spec.arg.name])
        for spec in mutations:
            self.graph.update_state(states[spec.target], results[spec.arg.name])
        return fuse_rms_norms(fold_weights(self.graph))

    def param(self, target: str, shape: tuple[int, ...], dtype: tg.DType) -> tg.Tensor:
        """The bound param of `target`, one per tied group: targets whose tensors are one
        tensor (same storage, offset, shape, strides and dtype; a tied LM head and token
        embedding) are one param, named by the group's first target in the signature's
        order (the module's `named_parameters` order: torch's canonical name, e.g. GPT-2's
        `transformer.wte.weight`, not its alias `lm_head.weight`), and every placeholder of
        the group reads it. So the weights are stored once and a gradient or a training
        step sees the tied parameter as torch does (the sum over its uses). Torch's export
        may route every use to any one alias (the last when non-strict, the first when
        strict); tensors of equal values but separate storage stay separate params."""
        canonical = self.tied_groups.get(target, target)
        if canonical not in self.params:
            value = np.array(self.value(canonical), dtype.to_numpy())
            self.params[canonical] = self.graph.param(canonical, shape, dtype, value)
        return self.params[canonical]

    @functools.cached_property
    def tied_groups(self) -> dict[str, str]:
        """Each bound target (parameter, buffer or lifted constant that is no state) ->
        the first bound target in the signature's order that is the same tensor."""
        signature = self.program.graph_signature
        stateful = {s.target for s in signature.output_specs if s.kind.name == "BUFFER_MUTATION"}
        first: dict[tuple, str] = {}
        groups: dict[str, str] = {}
        for spec in signature.input_specs:
            tensor = self.tensors.get(spec.target) if spec.target else None
            if not isinstance(tensor, torch.Tensor) or spec.target in stateful | self.read_states:
                continue
            key = (
                tensor.untyped_storage().data_ptr(),
                tensor.storage_offset(),
                tuple(tensor.shape),
                tuple(tensor.stride()),
                tensor.dtype,
            )
            groups[spec.target] = first.setdefault(key, spec.target)
        return groups

    def value(self, target: str) -> np.ndarray:
        """The current value of a parameter, buffer or lifted constant, as NumPy."""
        return to_numpy(self.tensors[target])

    def state(self, node: torch.fx.Node, target: str) -> object:
        """A mutated buffer as a state named `target`. A state starts as zeros, so a
        buffer holding anything else cannot be one (a problem, listed with the rest)."""
        meta = node.meta["val"]
        if np.any(self.value(target)):
            return self.fail(node, f"mutated buffer {target!r} is not all zeros (states start so)")
        return self.graph.state(target, static_shape(meta), to_dtype(meta.dtype))

    def run_graph(
        self, module: torch.fx.GraphModule, values: dict[str, object]
    ) -> list[tuple[torch.fx.Node | None, object]]:
        """Map the call_function nodes of `module.graph` (placeholders already in
        `values`); returns its output nodes with their values."""
        checked_only = _read_by_checks_only(module.graph)
        for node in module.graph.nodes:
            if node.name in checked_only:
                values[node.name] = None
            elif node.op == "call_function":
                values[node.name] = self.call(module, node, values)
            elif node.op == "get_attr":
                values[node.name] = getattr(module, node.target)
            elif node.op == "output":
                results = node.args[0]
                results = results if isinstance(results, list | tuple) else (results,)
                return [(r, _map(r, values)) for r in results]
        return []

    def call(self, module: torch.fx.GraphModule, node: torch.fx.Node, values: dict) -> object:
        target = node.target
        if target is torch.ops.higher_order.wrap_with_set_grad_enabled:
            # What export makes of a `torch.no_grad()` region: inference ignores grad
            # mode, so the submodule's graph is inlined with the operands as its inputs.
            submodule = _map(node.args[1], values)
            inner = dict(values)
            placeholders = [n for n in submodule.graph.nodes if n.op == "placeholder"]
            for placeholder, operand in zip(placeholders, node.args[2:], strict=True):
                inner[placeholder.name] = _map(operand, values)
            return tuple(value for _, value in self.run_graph(submodule, inner))
        args = _map(node.args, values)
        if getattr(target, "__name__", "") == "getitem":
            return args[0][args[1]]
        if is_size_op(target):
            return size_value(target, args)
        op = op_name(target)
        if op in _DROPPED:
            return None
        kwargs = {k: _map(v, values) for k, v in node.kwargs.items() if k not in _PLACEMENT}
        self.ctx.node = node
        handler = ATEN.get(op)
        if handler is None:
            return self.fail(node, f"unsupported op aten.{op}")
        try:
            result = handler(self.ctx, *args, **kwargs)
        except TensorGraphError as err:  # Unsupported, or a builder error on the arguments
            return self.fail(node, f"aten.{op}: {err}")
        except Exception as err:
            # A TypeError is an argument the handler's signature does not take; any other
            # failure is still this node's problem, listed with the rest, never a crash.
            return self.fail(node, f"aten.{op}: {type(err).__name__}: {err}")
        mismatch = _check_result(result, node.meta.get("val"))
        return self.fail(node, f"aten.{op}: {mismatch}") if mismatch else result

    def fail(self, node: torch.fx.Node, problem: str) -> object:
        """Record `problem` for `node`; return stand-ins of torch's shapes and dtypes."""
        where = source_line(node)
        self.problems.append(f"{node.name}: {problem}" + (f" (at {where})" if where else ""))
        return self.stand_in(node.meta.get("val"), node.name)

    def stand_in(self, meta: object, name: str) -> object:
        if isinstance(meta, list | tuple):
            return tuple(self.stand_in(m, f"{name}_{i}") for i, m in enumerate(meta))
        if isinstance(meta, torch.Tensor):
            # A dtype tensorgraph lacks, or a symbolic dimension, is already a reported
            # problem: float32 and extent 1 stand in.
            shape = tuple(d if isinstance(d, int) else 1 for d in meta.shape)
            dtype = DTYPES.get(meta.dtype, tg.float32)
            return self.graph.input(f"__unimported_{name}", shape, dtype)
        return None


def _read_by_checks_only(graph: torch.fx.Graph) -> set[str]:
    """Names of the call_function nodes whose value reaches nothing but the dropped
    assertions (`_DROPPED`), directly or through other such nodes: e.g. an int that
    `.item()` (`_local_scalar_dense`) reads only for export's runtime check `u0 >= 0`,
    left by a tensor the model builds and never uses (OPT's position mask when it is
    given position_ids). The checks are dropped, so these compute nothing that is kept;
    importing them would fail on their data-dependent shapes for no output. A node with
    no users at all is not one (it is imported as before)."""
    checked_only: set[str] = set()
    for node in reversed(graph.nodes):
        if node.op != "call_function" or not node.users:
            continue
        if all(
            user.name in checked_only
            or (user.op == "call_function" and op_name(user.target) in _DROPPED)
            for user in node.users
        ):
            checked_only.add(node.name)
    return checked_only


def _check_result(result: object, meta: object) -> str:
    """'' when `result` has torch's shapes and dtypes `meta`, else what differs."""
    if isinstance(meta, torch.Tensor):
        if shape_problem(meta):
            return shape_problem(meta)
        if not isinstance(result, tg.Tensor):
            return f"handler returned {type(result).__name__}, torch gives a tensor"
        want = (static_shape(meta), DTYPES.get(meta.dtype))
        if (result.shape, result.dtype) != want:
            return f"handler made {result.shape} {result.dtype}, torch gives {want[0]} {want[1]}"
        return ""
    if isinstance(meta, list | tuple) and isinstance(result, list | tuple):
        # Elements a handler leaves out (None, or a stand-in for an autograd-only result
        # that fails when read) are not computed here: only the Tensors are checked.
        for got, expected in zip(result, meta, strict=False):
            if isinstance(got, tg.Tensor) and expected is not None:
                problem = _check_result(got, expected)
                if problem:
                    return problem
    return ""


def _map(value: object, values: dict[str, object]) -> object:
    if isinstance(value, torch.fx.Node):
        return values[value.name]
    if isinstance(value, list | tuple):
        return type(value)(_map(v, values) for v in value)
    return value
