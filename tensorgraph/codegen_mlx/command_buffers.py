"""How many ops MLX's GPU backends put in one command buffer, set before the first one
is committed.

Why. On the GPU (CUDA and Metal alike) MLX keeps every input of an op alive until the
command buffer holding the op has completed, not until the op itself has run: a value
the plan frees at its last reader stays allocated until up to MLX_MAX_OPS_PER_BUFFER
ops later (20 by default on CUDA). Inside a planned segment that retention is memory the
plan does not hold: on an H200, Whisper's encoder (bench_delegate_memory.py) peaked at
1.367-1.419x its plan with the default of 20 and at 1.070x with 4 or 1; the call also
got faster (7.50 ms at 20, 6.27 at 1, 5.80 at 4: smaller CUDA graphs start sooner).
`benches/probe_cuda_peak.py` measures it.

MLX reads the variable once, at its first commit, so it is set when this package is
imported, before any GPU work of tensorgraph's. A value the user set is kept (the
variable is theirs to tune); work committed on a GPU before tensorgraph was imported
has already fixed MLX's value for the process. The CPU backend ignores it.

Metal is not measured: its backend releases an op's inputs with its command buffer too
(and defaults to more ops per buffer than CUDA's 20), so the same excess over the plan
is expected there; what more, smaller buffers cost in commits per call is not known
(a small model's decode step, a few hundred ops, is where it would show). The setting
is the same on both GPU backends until a Metal measurement says otherwise.
"""

from __future__ import annotations

import os

VARIABLE = "MLX_MAX_OPS_PER_BUFFER"
OPS_PER_BUFFER = 4


def ensure_command_buffers() -> str:
    """Set MLX's ops per GPU command buffer to OPS_PER_BUFFER unless the user set it;
    returns the value in effect for the process (once MLX has read it)."""
    return os.environ.setdefault(VARIABLE, str(OPS_PER_BUFFER))
