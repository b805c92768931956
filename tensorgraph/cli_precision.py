"""--dtype, --quantize, --group-size and --quant-mode of `compile`, `run` and `generate`:
how a model's weights are stored.

Invariants: options that do not go together (--group-size or --quant-mode without
--quantize, a group size the mode refuses) are a `UsageError` before anything is built
or compiled; `_precision` converts with the library's own `tg.to_dtype` and
`tg.quantize` (or `quantize_weights`, to report the weights kept float), so the command
line converts exactly as the Python API does.
"""

from __future__ import annotations

import argparse

import numpy as np

from tensorgraph.cli_args import UsageError
from tensorgraph.errors import TensorGraphError


def _precision_options(sub: argparse.ArgumentParser) -> None:
    """--dtype, --quantize, --group-size, --quant-mode: how the weights are stored."""
    from tensorgraph.ir.quantized import MODES

    sub.add_argument(
        "--dtype",
        choices=("float32", "bfloat16", "float16"),
        default="float32",
        help="compute and weight dtype (tg.to_dtype; default float32)",
    )
    sub.add_argument(
        "--quantize",
        type=int,
        choices=(2, 3, 4, 5, 6, 8),
        metavar="BITS",
        help="quantize matmul weights and embedding tables to BITS (tg.quantize; 2-6 or 8; "
        "default: none)",
    )
    sub.add_argument(
        "--group-size",
        type=int,
        choices=(16, 32, 64, 128),
        default=None,
        metavar="G",
        help="values per scale with --quantize (default 64; 32 for mxfp4/mxfp8, 16 nvfp4)",
    )
    sub.add_argument(
        "--quant-mode",
        choices=tuple(MODES),
        default="affine",
        help="quantization mode with --quantize (default affine)",
    )


def _group_size(args: argparse.Namespace) -> int | None:
    """The group size --quantize uses (None without it); UsageError for options that
    do not go together, before anything is built."""
    from tensorgraph.ir.quantized import check_quantization

    if args.quantize is None:
        if args.group_size is not None or args.quant_mode != "affine":
            raise UsageError("--group-size and --quant-mode take effect only with --quantize BITS")
        return None
    group = args.group_size or {"nvfp4": 16, "mxfp4": 32, "mxfp8": 32}.get(args.quant_mode, 64)
    try:
        check_quantization(args.quant_mode, args.quantize, group)
    except TensorGraphError as err:
        raise UsageError(str(err)) from err
    return group


def _precision(args: argparse.Namespace, graph: object, notes: list | None = None) -> object:
    """`graph` (or a mapping of entries) in --dtype, quantized as --quantize asks, with
    a line per weight that stayed float (and why) appended to `notes`; UsageError for a
    bad combination, before any compile."""
    from tensorgraph import quantize, to_dtype
    from tensorgraph.passes.quantize import quantize_weights

    group = _group_size(args)
    graph = to_dtype(graph, args.dtype)
    if args.quantize is None:
        return graph
    if notes is None or not hasattr(graph, "nodes"):
        return quantize(graph, bits=args.quantize, group_size=group, mode=args.quant_mode)
    result = quantize_weights(graph, bits=args.quantize, group_size=group, mode=args.quant_mode)
    notes += [f"kept float: {name} ({why})" for name, why in result.stats["kept"].items()]
    return result.graph


def _typed_inputs(graph: object, inputs: dict) -> dict:
    """`inputs` rounded to the dtypes `graph` declares (after --dtype): what a user of a
    reduced-precision model feeds."""
    declared = {n.name: n.dtype.to_numpy() for n in graph.inputs}
    return {
        k: np.asarray(v).astype(declared.get(k, np.asarray(v).dtype)) for k, v in inputs.items()
    }


def _converted(args: argparse.Namespace) -> bool:
    return args.dtype != "float32" or args.quantize is not None


def _precision_name(args: argparse.Namespace) -> str:
    parts = [args.dtype]
    if args.quantize is not None:
        parts.append(f"{args.quantize}-bit {args.quant_mode}")
    if getattr(args, "kv_bits", None) is not None:
        parts.append(f"{args.kv_bits}-bit KV cache")
    return " ".join(parts)
