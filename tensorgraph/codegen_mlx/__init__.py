"""The MLX backend: a lowering table (op -> mlx.core) and an executor that follows the
plan's liveness. Importing this package loads a fast system BLAS before mlx.core."""

from tensorgraph.codegen_mlx.blas import blas_info, ensure_blas

ensure_blas()

from tensorgraph.codegen_mlx.executor import run_mlx  # noqa: E402
from tensorgraph.codegen_mlx.lowering import LOWERINGS  # noqa: E402

__all__ = ["LOWERINGS", "blas_info", "ensure_blas", "run_mlx"]
