"""A fast BLAS for MLX's Linux CPU backend, loaded before mlx.core is first imported.

The Linux `mlx[cpu]` wheel links the reference BLAS (a 1024x1024 fp32 matmul runs at a
few GFLOP/s). Loading a system OpenBLAS with RTLD_GLOBAL first makes MLX's BLAS calls
resolve to it (~50x faster here). Install it on Debian/Ubuntu with
`apt-get install libopenblas0-pthread`. TENSORGRAPH_BLAS=off disables the loading and
TENSORGRAPH_BLAS=/path/to/libblas.so picks a library. Never raises: without a library,
or once mlx.core is already imported (too late to interpose), MLX keeps its own BLAS.
"""

from __future__ import annotations

import ctypes
import glob
import os
import platform
import sys

_loaded: dict[str, str | None] = {}

CANDIDATES = (
    "/usr/lib/*-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/*-linux-gnu/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
    "/usr/lib/libopenblas.so.0",
)


def find_blas() -> str | None:
    """The path of a system OpenBLAS, or None."""
    choice = os.environ.get("TENSORGRAPH_BLAS", "")
    if choice == "off":
        return None
    if choice:
        return choice if os.path.exists(choice) else None
    for pattern in CANDIDATES:
        matches = sorted(glob.glob(pattern))
        if matches:
            return matches[0]
    return None


def ensure_blas() -> str | None:
    """Load a system BLAS once, before mlx.core; returns the loaded path or None."""
    if "path" in _loaded:
        return _loaded["path"]
    path = None
    if platform.system() == "Linux" and "mlx.core" not in sys.modules:
        candidate = find_blas()
        if candidate:
            try:
                ctypes.CDLL(candidate, mode=ctypes.RTLD_GLOBAL)
                path = candidate
            except OSError:
                path = None
    _loaded["path"] = path
    return path


def blas_info() -> str:
    """What BLAS MLX uses, in words (for reports and benchmarks)."""
    path = ensure_blas()
    if path:
        return f"system OpenBLAS ({path})"
    if platform.system() == "Linux":
        return "MLX's bundled reference BLAS (install libopenblas0-pthread for speed)"
    return "MLX's platform BLAS"
