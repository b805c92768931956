"""Random chains of the ops added for imported models, compiled with the default passes
(so reinplacing and the arena planner place them over dead operands): the arena
executor and MLX (eager) must give the reference's values for every chain."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tests.codegen_mlx.test_ops_math import run_all

# Each step keeps the shape (2, 3, 4, 4) and values small. Steps that jump (rounding,
# remainders) would turn a last-place difference of MLX's erf or atan into a whole unit, so
# a chain applies them first, while values are still bit-identical on every backend.
DISCONTINUOUS = ("floor", "round", "trunc", "sign", "remainder", "fmod")
FLOAT_STEPS = {
    "floor": lambda x: tg.floor(x * 3.0),
    "round": lambda x: tg.round(x * 2.0),
    "trunc": tg.trunc,
    "sign": tg.sign,
    "erf": tg.erf,
    "atan": tg.atan,
    "expm1": lambda x: tg.expm1(tg.tanh(x)),
    "remainder": lambda x: tg.remainder(x, 0.75),
    "fmod": lambda x: tg.fmod(x, -0.6),
    "atan2": lambda x: tg.atan2(x, tg.cos(x)),
    "cumsum": lambda x: tg.tanh(tg.cumsum(x, -1)),
    "max_pool": lambda x: tg.max_pool2d(x, 3, 1, 1, 1, True),
    "avg_pool": lambda x: tg.avg_pool2d(x, 2, 1, 1, True, False)[:, :, :4, :4],
    "adaptive": lambda x: tg.upsample_bilinear2d(tg.adaptive_avg_pool2d(x, 3), 4),
    "pad": lambda x: tg.pad(x, [(0, 0), (0, 0), (1, -1), (-2, 2)], 0.5),
    "reflect": lambda x: tg.pad(x, [(0, 0), (0, 0), (2, 1)], mode="reflect")[:, :, 1:5],
    "nan_to_zero": lambda x: tg.where(tg.isnan(x), 0.0, x),
}
INT_STEPS = {
    "floor_divide": lambda x: tg.floor_divide(x, 3),
    "remainder": lambda x: tg.remainder(x, -4),
    "bitwise": lambda x: tg.bitwise_xor(x, tg.bitwise_and(x, 6)),
    "not": tg.bitwise_not,
    "cumsum": lambda x: tg.remainder(tg.cumsum(x, 2), 50).astype(tg.int32),
    "gather": lambda x: tg.gather(x, tg.remainder(x, 4), 3),
    "nearest": lambda x: tg.upsample_nearest2d(tg.max_pool2d(x, 2), 4),
    "prod": lambda x: tg.broadcast_to(tg.prod(tg.sign(x), 1, True), (2, 3, 4, 4)),
}


@settings(max_examples=25)
@given(
    st.lists(st.sampled_from(sorted(FLOAT_STEPS)), min_size=1, max_size=5),
    st.lists(st.sampled_from(sorted(INT_STEPS)), min_size=1, max_size=5),
)
def test_random_chains_agree_on_every_backend(float_steps, int_steps) -> None:
    rng = np.random.default_rng(len(float_steps) * 7 + len(int_steps))
    x = rng.uniform(-2, 2, (2, 3, 4, 4)).astype(np.float32)
    n = rng.integers(-20, 20, (2, 3, 4, 4)).astype(np.int32)

    def build(a, b):
        for name in sorted(float_steps, key=lambda step: step not in DISCONTINUOUS):
            a = FLOAT_STEPS[name](a)
        for name in int_steps:
            b = INT_STEPS[name](b)
        return a, b, tg.any(b > 3, (1, 2)), tg.argmin(b, -1)

    run_all(build, x, n, rtol=1e-5, atol=1e-5, compiled=False)
