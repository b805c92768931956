"""Import a `torch.export` program as a tensorgraph graph (weights become bound params).

`from_torch(module, example_inputs)` exports the module, then maps every ATen call of the
exported graph onto tensorgraph ops, one handler per ATen op (the table `ATEN` of
`importers.aten`), emitting what the export says and nothing cleverer: tensorgraph's own
passes make the difference. Parameters, buffers and lifted constants become params bound
to their values; user inputs become inputs named after the export's placeholders.
Afterwards computations on weights alone (a transposed `nn.Linear` weight, batch-norm
scale and shift) are folded into params (`passes.fold`), as ExecuTorch's constant
propagation does. Unsupported ops raise one GraphError listing every one of them with its
nodes. Needs the `torch` extra.
"""

from __future__ import annotations

import numpy as np

import tensorgraph as tg
from tensorgraph.errors import GraphError
from tensorgraph.passes.fold import fold_weights

try:
    import torch
except ImportError as err:  # pragma: no cover - exercised only without torch
    raise ImportError(
        "tensorgraph.importers.torch_export needs torch: pip install 'tensorgraph[torch]'"
    ) from err

# The handler table needs torch too: imported once the check above has passed.
from tensorgraph.importers.aten import (
    ATEN,
    COMPARE,
    DTYPES,
    UNARY,
    Context,
    Handler,
    handles,
    to_dtype,
)

__all__ = [
    "ATEN",
    "COMPARE",
    "DTYPES",
    "UNARY",
    "Context",
    "Handler",
    "from_exported",
    "from_torch",
    "handles",
    "to_dtype",
]


def _op_name(target: object) -> str:
    packet = getattr(target, "overloadpacket", None)
    return packet.__name__ if packet is not None else getattr(target, "__name__", str(target))


def from_exported(program: torch.export.ExportedProgram, name: str = "torch") -> tg.Graph:
    """The tensorgraph graph of an ExportedProgram (see the module docstring)."""
    fx_nodes = list(program.graph.nodes)
    unsupported: dict[str, list[str]] = {}
    for node in fx_nodes:
        if node.op == "call_function":
            op = _op_name(node.target)
            if op not in ATEN and op != "getitem":
                unsupported.setdefault(f"aten.{op}", []).append(node.name)
    if unsupported:
        listing = "; ".join(
            f"{op} (nodes {', '.join(nodes)})" for op, nodes in sorted(unsupported.items())
        )
        raise GraphError(f"unsupported ATen op(s) in {name!r}: {listing}")
    graph = tg.Graph(name)
    ctx = Context(graph)
    values: dict[str, object] = {}
    state = {**program.state_dict, **getattr(program, "constants", {})}
    specs = {spec.arg.name: spec for spec in program.graph_signature.input_specs}
    for node in fx_nodes:
        ctx.node = node
        if node.op == "placeholder":
            meta = node.meta["val"]
            spec = specs[node.name]
            shape, dtype = tuple(int(d) for d in meta.shape), to_dtype(meta.dtype)
            if spec.kind.name == "USER_INPUT":
                values[node.name] = graph.input(node.name, shape, dtype)
            else:
                array = state[spec.target].detach().cpu().contiguous().numpy()
                values[node.name] = graph.param(
                    spec.target, shape, dtype, np.array(array, dtype.to_numpy())
                )
        elif node.op == "call_function":
            args = _map(node.args, values)
            kwargs = {
                k: _map(v, values)
                for k, v in node.kwargs.items()
                if k not in ("device", "layout", "pin_memory", "memory_format")
            }
            if _op_name(node.target) == "getitem":
                values[node.name] = args[0][args[1]]
                continue
            kwargs.pop("dtype", None) if _op_name(node.target) not in ("_to_copy", "to") else None
            values[node.name] = ATEN[_op_name(node.target)](ctx, *args, **kwargs)
        elif node.op == "output":
            outputs = node.args[0]
            user = [
                spec
                for spec in program.graph_signature.output_specs
                if spec.kind.name == "USER_OUTPUT"
            ]
            names = {spec.arg.name for spec in user}
            for out in outputs:
                if out is not None and out.name in names:
                    graph.output(values[out.name])
    return fold_weights(graph)


def _map(value: object, values: dict[str, object]) -> object:
    if isinstance(value, torch.fx.Node):
        return values[value.name]
    if isinstance(value, list | tuple):
        return type(value)(_map(v, values) for v in value)
    return value


def from_torch(module: torch.nn.Module, example_inputs: tuple, name: str | None = None) -> tg.Graph:
    """Export `module` on `example_inputs` with torch.export and import the program."""
    program = torch.export.export(module, tuple(example_inputs))
    return from_exported(program, name or type(module).__name__.lower())
