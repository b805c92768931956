"""Weights in safetensors files: `tg.save_weights(source, path)`, `tg.load_weights(path)`.

safetensors is the format MLX (`mx.load`, `mx.save_safetensors`), Hugging Face and
mlx-lm checkpoints use: an 8-byte little-endian header length, a JSON header (each
tensor's dtype code, shape and byte range, plus free-text `__metadata__`), then the
tensors' raw little-endian bytes, row-major. Every tensorgraph dtype has a code (BOOL,
U8, U32, I8, I16, I32, I64, F16, BF16, F32); a bfloat16 tensor is written as BF16 with
its raw 2-byte patterns, so `mx.load`, `safetensors.torch.load_file` and
`safetensors.numpy.load_file` all read it back as bfloat16, bit for bit.

A tensor is named by its param: a quantized param's packed codes, scales and biases are
`{name}`, `{name}.scales` and `{name}.biases` (`passes.quantize`), exactly as in an
mlx-lm checkpoint, so exported arrays feed `mx.quantized_matmul` as they are, and a
checkpoint's arrays bind to a graph's params (`graph.bind`) or are passed at run time
(`prog.run(feeds, params=tg.load_weights(path))`), where the program checks each one's
shape and dtype.

Errors: a path that cannot be written is a SaveError naming it; a file that is missing
or not safetensors, or a tensor of a dtype tensorgraph has no type for (F64, U16, the
FP8 codes...), is a LoadError naming the file (and the tensor).
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from tensorgraph.errors import LoadError, SaveError, TensorGraphError
from tensorgraph.ir.dtypes import DTYPES, as_dtype
from tensorgraph.ir.graph import Graph

# tensorgraph dtype name -> safetensors dtype code (the header's "dtype")
CODES = {
    "bool": "BOOL",
    "uint8": "U8",
    "uint32": "U32",
    "int8": "I8",
    "int16": "I16",
    "int32": "I32",
    "int64": "I64",
    "float16": "F16",
    "bfloat16": "BF16",
    "float32": "F32",
}
_DTYPE_OF_CODE = {code: DTYPES[name] for name, code in CODES.items()}


def check_target(target: Path, what: str) -> None:
    """SaveError naming `target` when it is a folder or its folder does not exist."""
    if target.is_dir():
        raise SaveError(f"{target}: is a folder; give a file path such as {target / what}")
    if not target.parent.is_dir():
        raise SaveError(f"{target}: the folder {target.parent} does not exist")


def checksum(value: np.ndarray) -> int:
    """The CRC-32 of `value`'s row-major bytes (a 0-d or empty array included)."""
    return zlib.crc32(np.asarray(value, order="C").reshape(-1).view(np.uint8))


def write_tensors(
    target: Path, tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str]
) -> None:
    """Write `tensors` (name -> array of a tensorgraph dtype) as a safetensors file at
    `target` (written to a temporary file, then renamed: an old file is replaced whole
    or not at all); SaveError naming the path when the filesystem refuses."""
    from safetensors import SafetensorError
    from safetensors.numpy import save_file

    # safetensors reads each array's memory as it lies: only C order is row-major.
    arrays = {name: np.asarray(value, order="C") for name, value in tensors.items()}
    try:
        save_file(arrays, target, metadata=dict(metadata))
    except (SafetensorError, OSError) as err:
        raise SaveError(f"{target}: cannot write the weights file ({err})") from err


def read_metadata(path: Path) -> dict[str, str] | None:
    """The `__metadata__` of the safetensors file at `path` ({} when it has none), or
    None when `path` is not a readable safetensors file."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(path, framework="np") as handle:
            return dict(handle.metadata() or {})
    except (SafetensorError, OSError):
        return None


def read_tensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of the safetensors file at `path`, as owned row-major arrays of
    tensorgraph dtypes (bfloat16 from ml_dtypes), in the file's order; LoadError naming
    the file (and the tensor) when it is missing, is not safetensors, or holds a dtype
    tensorgraph has no type for."""
    from safetensors import SafetensorError, safe_open

    if not path.is_file():
        raise LoadError(f"{path}: no such weights file")
    tensors: dict[str, np.ndarray] = {}
    try:
        with safe_open(path, framework="np") as handle:
            for name in handle.keys():  # noqa: SIM118 (a safe_open handle is no dict)
                code = handle.get_slice(name).get_dtype()
                if code not in _DTYPE_OF_CODE:
                    raise LoadError(
                        f"{path}: tensor {name!r} is {code}, which tensorgraph has no dtype "
                        f"for (it reads {', '.join(_DTYPE_OF_CODE)})"
                    )
                dtype = _DTYPE_OF_CODE[code].to_numpy()
                tensors[name] = np.array(handle.get_tensor(name), dtype=dtype, order="C")
    except (SafetensorError, OSError) as err:
        raise LoadError(f"{path}: not a readable safetensors file ({err})") from err
    return tensors


def weights_of(source: object) -> dict[str, np.ndarray]:
    """The bound weights (param name -> array) of a Graph, a Program, a MultiProgram
    (every entry's; a name bound in several entries must hold the same array) or a
    mapping of arrays; SaveError naming the param whose entries disagree."""
    if isinstance(source, Graph):
        return dict(source.param_values)
    entries = getattr(source, "entries", None)
    if entries is not None:
        weights: dict[str, np.ndarray] = {}
        first: dict[str, str] = {}  # param name -> the entry it was first seen in
        for entry, program in entries.items():
            for name, value in program.graph.param_values.items():
                if name in weights and not _same(weights[name], value):
                    raise SaveError(
                        f"param {name!r} holds different arrays in entries "
                        f"{first[name]!r} and {entry!r}; one file can hold only one"
                    )
                weights.setdefault(name, value)
                first.setdefault(name, entry)
        return weights
    graph = getattr(source, "graph", None)
    if isinstance(graph, Graph):
        return dict(graph.param_values)
    if isinstance(source, Mapping):
        return {str(name): np.asarray(value) for name, value in source.items()}
    raise SaveError(
        f"save_weights takes a Graph, a Program, a MultiProgram or a dict of arrays, "
        f"not {type(source).__name__}"
    )


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a is b:
        return True
    return a.dtype == b.dtype and a.shape == b.shape and checksum(a) == checksum(b)


def save_weights(source: object, path: str | os.PathLike) -> None:
    """Write the bound weights of `source` (a Graph, a Program, a MultiProgram or a dict
    name -> array) to a safetensors file at `path`, one tensor per param name, in the
    param's dtype and shape (a quantized param's `{name}`, `{name}.scales`,
    `{name}.biases` included), readable by `mx.load` and any safetensors reader.
    SaveError naming the path (a folder, a missing folder, refused by the filesystem),
    the param (a dtype tensorgraph has no type for; different arrays under one name in
    two entries) or the source's type."""
    target = Path(path)
    check_target(target, "weights.safetensors")
    weights = weights_of(source)
    for name, value in weights.items():
        try:
            as_dtype(value.dtype)
        except TensorGraphError as err:
            raise SaveError(f"{target}: param {name!r}: {err}") from err
    write_tensors(target, weights, {"producer": "tensorgraph"})


def load_weights(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """The tensors of the safetensors file at `path` (one written by `save_weights`, an
    mlx-lm or Hugging Face checkpoint, `mx.save_safetensors`), name -> owned NumPy array
    of the tensor's dtype (bfloat16 from ml_dtypes), exactly the stored bytes. LoadError
    naming the file when it is missing or not safetensors, and the tensor when
    tensorgraph has no dtype for it."""
    return read_tensors(Path(path))
