"""Test-wide settings: hypothesis without deadlines (shared 2-core machines are noisy),
the compiler's debug checks (verifier after every pass, plan verification) on, and MLX's
float32 matmuls at full float32 precision."""

import os

from hypothesis import HealthCheck, settings

# MLX runs float32 matmul-class ops (matmul, conv, attention) as TF32 by default on CUDA
# and M5 Apple GPUs: a 10-bit mantissa, errors near 1e-3, where the tests compare with
# the NumPy oracle (float32 BLAS) at 1e-5. MLX reads the variable once, at its
# first such op, so it must be set before any test imports and runs mlx (subprocesses
# started by tests inherit it). Forced, not setdefault: the suite's tolerances assume it.
os.environ["MLX_ENABLE_TF32"] = "0"
os.environ.setdefault("TENSORGRAPH_DEBUG", "1")

# Under pytest-xdist (pyproject's addopts run two workers) each worker gets its own MLX
# CPU kernel cache: MLX compiles a kernel by writing `$TMPDIR/mlx/<version>/cpu/lib*.so`
# in place and loads any such file that exists, so a worker reaching a kernel while the
# other's compiler is still writing it would load a partial library. The directories
# persist (warm on the next run); set before any test imports mlx, which reads TMPDIR
# per kernel, and inherited by the subprocesses tests start.
_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker:
    _cache = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"tensorgraph-pytest-{_worker}")
    os.makedirs(_cache, exist_ok=True)
    os.environ["TMPDIR"] = _cache

settings.register_profile(
    "default",
    deadline=None,
    max_examples=40,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("thorough", deadline=None, max_examples=400)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
