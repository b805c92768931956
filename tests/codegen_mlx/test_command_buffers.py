"""Importing the MLX backend caps MLX's ops per GPU command buffer (command_buffers.py),
and keeps a value the user set. Each case runs in a fresh interpreter: MLX reads the
variable once per process."""

from __future__ import annotations

import os
import subprocess
import sys

from tensorgraph.codegen_mlx.command_buffers import OPS_PER_BUFFER, VARIABLE

PROBE = "import os, tensorgraph.codegen_mlx; print(os.environ['MLX_MAX_OPS_PER_BUFFER'])"


def value_after_import(environ: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=environ, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_import_sets_the_cap_when_unset() -> None:
    environ = {k: v for k, v in os.environ.items() if k != VARIABLE}
    assert value_after_import(environ) == str(OPS_PER_BUFFER)


def test_a_users_value_is_kept() -> None:
    assert value_after_import(dict(os.environ, **{VARIABLE: "17"})) == "17"
