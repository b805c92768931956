"""The MLX backend: array conversion (arrays), a lowering table op -> mlx.core
(lowering), the run-time checks MLX does not make (guards), segmented execution
(segments), per-run accounting (stats) and an executor that follows the plan's
liveness. Importing this package loads a fast system BLAS before mlx.core and sets
how many ops MLX's GPU backends put in one command buffer (command_buffers.py)."""

from tensorgraph.codegen_mlx.blas import blas_info, ensure_blas
from tensorgraph.codegen_mlx.command_buffers import ensure_command_buffers

ensure_blas()
ensure_command_buffers()

from tensorgraph.codegen_mlx.arrays import to_mx, to_numpy  # noqa: E402
from tensorgraph.codegen_mlx.executor import MODES, last_run, run_mlx  # noqa: E402
from tensorgraph.codegen_mlx.lowering import LOWERINGS  # noqa: E402
from tensorgraph.codegen_mlx.stats import RunStats  # noqa: E402

__all__ = [
    "LOWERINGS",
    "MODES",
    "RunStats",
    "blas_info",
    "ensure_blas",
    "ensure_command_buffers",
    "last_run",
    "run_mlx",
    "to_mx",
    "to_numpy",
]
