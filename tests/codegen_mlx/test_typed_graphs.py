"""Random graphs over every dtype kind, 0-d and zero-size tensors (strategies.py) run on
MLX, eagerly and traced, to the NumPy reference's shapes, dtypes and values."""

import numpy as np
from hypothesis import given, settings

import tensorgraph as tg
from tests.codegen_mlx.strategies import Case, typed_graphs


def assert_matches(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    """Same count, then per output shape, dtype and values: integers and bools exactly,
    floats within float32 rounding of the reference (nan where it has nan)."""
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        assert g.dtype == w.dtype
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, w)


@settings(max_examples=60)
@given(typed_graphs())
def test_typed_random_graphs_match_the_reference(case: Case) -> None:
    prog = tg.compile(case.graph)
    want = prog.run(case.inputs, backend="numpy")
    for mode in ("auto", "eager", "compiled"):
        assert_matches(prog.run(case.inputs, backend="mlx", mode=mode), want)
