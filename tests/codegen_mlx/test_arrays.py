"""arrays.py: NumPy <-> MLX conversion keeps shape (0-d included), dtype and bits; an
mx.array's dtype reads back as the IR's name."""

import ml_dtypes
import mlx.core as mx
import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tensorgraph.codegen_mlx.arrays import MX_DTYPES, native_dtype, to_mx, to_numpy
from tensorgraph.ir.dtypes import DTYPES

NUMPY_DTYPES = [d.to_numpy() for d in DTYPES.values()]


def test_every_ir_dtype_has_an_mlx_dtype() -> None:
    assert set(MX_DTYPES) == set(DTYPES)


@given(
    st.sampled_from(NUMPY_DTYPES),
    hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4),
    st.booleans(),
    st.integers(0, 2**16),
)
def test_round_trip_is_exact(dtype, shape, strided, seed) -> None:
    # Random bytes cover every bit pattern (nan payloads included) of every dtype.
    rng = np.random.default_rng(seed)
    count = int(np.prod(shape)) * (2 if strided else 1)
    raw = rng.integers(0, 256, count * np.dtype(dtype).itemsize, dtype=np.uint8)
    array = raw.view(dtype) if dtype != np.bool_ else raw[:count] % 2 == 1
    array = array[::2] if strided else array  # a non-contiguous view
    array = array.reshape(shape)
    back = to_numpy(to_mx(array))
    assert back.shape == array.shape  # np.ascontiguousarray made 0-d arrays (1,)
    assert back.dtype == array.dtype
    if dtype == ml_dtypes.bfloat16:  # float32 holds every bfloat16 but quiets nan payloads
        np.testing.assert_array_equal(back.astype(np.float32), array.astype(np.float32))
    else:
        assert back.tobytes() == np.ascontiguousarray(array).tobytes()
    assert back.flags.writeable and not np.shares_memory(back, array)


def test_native_dtype_names_mx_arrays_only() -> None:
    for name, dtype in MX_DTYPES.items():
        assert native_dtype(mx.zeros((2,), dtype=dtype)) == name
    # A dtype the IR lacks keeps MLX's own short name, so an error reads "float64".
    assert native_dtype(mx.zeros((2,), dtype=mx.float64)) == "float64"
    assert native_dtype(mx.zeros((), dtype=mx.uint32)) == "uint32"
    for other in (np.zeros(2, np.float32), 1.0, [1, 2], None):
        assert native_dtype(other) is None
