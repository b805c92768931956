"""train_step_from_gradients: a gradient graph (hand-built from a closed form) becomes a
step whose params are states updated in place; N steps equal mx.value_and_grad with
mlx.optimizers and a float64 transcription; every backend agrees (arena == numpy bit
for bit); a failed step leaves weights and optimizer state unchanged; bad graphs are
named errors."""

import functools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorgraph as tg
from tensorgraph.runtime.state import HOST_LIMIT
from tensorgraph.training import STEP_STATE
from tests.training.reference import least_squares, logistic, mlx_train, numpy_train
from tests.training.strategies import hyperparameters

STEPS = 5
OPTIMIZERS = {
    "sgd": ("SGD", {"learning_rate": 0.1}),
    "sgd-momentum": (
        "SGD",
        {"learning_rate": 0.05, "momentum": 0.9, "weight_decay": 0.01, "dampening": 0.1},
    ),
    "sgd-nesterov": ("SGD", {"learning_rate": 0.05, "momentum": 0.8, "nesterov": True}),
    "adam": ("Adam", {"learning_rate": 0.01}),
    "adam-corrected": ("Adam", {"learning_rate": 0.01, "bias_correction": True}),
    "adamw": ("AdamW", {"learning_rate": 0.02, "betas": (0.8, 0.99), "weight_decay": 0.1}),
    "adamw-corrected": ("AdamW", {"learning_rate": 0.02, "bias_correction": True}),
}
PROBLEMS = {"least_squares": least_squares, "logistic": logistic}


@functools.cache
def compiled(problem: str, optimizer: str) -> tuple:
    made = PROBLEMS[problem]()
    kind, hyper = OPTIMIZERS[optimizer]
    step = tg.train_step_from_gradients(made.graph, getattr(tg.optim, kind)(**hyper))
    return made, tg.compile(step)


def train(program: tg.Program, feeds: dict, backend: str, steps: int = STEPS) -> tuple:
    state = program.new_state(backend)
    losses = [program.run(feeds, backend=backend, state=state)[0] for _ in range(steps)]
    return [np.asarray(loss) for loss in losses], state


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("problem", PROBLEMS)
def test_steps_equal_mlx_optimizers_and_the_float64_formulas(problem, optimizer):
    made, program = compiled(problem, optimizer)
    kind, hyper = OPTIMIZERS[optimizer]
    mlx_losses, mlx_params, mlx_moments = mlx_train(made, kind, hyper, STEPS)
    ref_losses, ref_params, ref_moments = numpy_train(made, kind, hyper, STEPS)
    losses, state = train(program, made.feeds, "numpy")
    assert all(loss.shape == () and loss.dtype == np.float32 for loss in losses)
    np.testing.assert_allclose(losses, mlx_losses, rtol=1e-5)
    # float32 against float64 over 5 steps of a well-conditioned problem (inputs and
    # weights of order 1): a few hundred roundings of 2^-24 each
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-5)
    for name in made.initial:
        np.testing.assert_allclose(state[name], mlx_params[name], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(state[name], ref_params[name], rtol=1e-5, atol=1e-6)
        for moment, value in ref_moments[name].items():
            np.testing.assert_allclose(state[f"{name}.{moment}"], value, rtol=1e-5, atol=1e-7)
            np.testing.assert_allclose(
                state[f"{name}.{moment}"], mlx_moments[name][moment], rtol=1e-5, atol=1e-7
            )
    if kind != "SGD" and hyper.get("bias_correction"):
        assert state[STEP_STATE] == STEPS


@pytest.mark.parametrize("optimizer", ["sgd-momentum", "adamw-corrected"])
@pytest.mark.parametrize("problem", PROBLEMS)
def test_backends_agree_and_the_arena_equals_the_reference_bit_for_bit(problem, optimizer):
    made, program = compiled(problem, optimizer)
    losses, state = train(program, made.feeds, "numpy")
    arena_losses, arena_state = train(program, made.feeds, "arena")
    mlx_losses, mlx_state = train(program, made.feeds, "mlx")
    names = sorted(n.name for n in program.graph.states)
    assert [loss.tobytes() for loss in arena_losses] == [loss.tobytes() for loss in losses]
    for name in names:
        assert arena_state[name].tobytes() == state[name].tobytes(), name
        np.testing.assert_allclose(mlx_state[name], state[name], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.array(mlx_losses), np.array(losses), rtol=1e-5)


def test_the_step_holds_weights_and_moments_as_states_and_returns_the_loss_before_updating():
    made, program = compiled("least_squares", "adam-corrected")
    graph = program.graph
    assert not graph.params  # both params trained: none is left a param
    assert {n.name for n in graph.states} == {
        "w", "b", "w.m", "w.v", "b.m", "b.v", STEP_STATE,
    }  # fmt: skip
    np.testing.assert_array_equal(graph.state_values["w"], made.initial["w"])
    state = program.new_state("numpy")
    assert not state["w.m"].any() and not state["w.v"].any()  # zeros at first
    first = program.run(made.feeds, backend="numpy", state=state)[0]
    x, y = made.feeds["x"].astype(np.float64), made.feeds["y"].astype(np.float64)
    r = x @ made.initial["w"] + made.initial["b"] - y
    np.testing.assert_allclose(first, np.mean(r * r), rtol=1e-6)  # the initial weights'
    assert not np.array_equal(state["w"], made.initial["w"])  # and then updated


def test_untrained_params_stay_params():
    made = least_squares()
    only_w = tg.Graph.from_nodes(
        "w_only",
        made.graph.nodes,
        made.graph.outputs[:2],
        made.graph.param_values,
    )
    step = tg.train_step_from_gradients(only_w, tg.optim.SGD(0.1), wrt=["w"])
    assert [n.name for n in step.params] == ["b"] and "b" in step.param_values
    assert {n.name for n in step.states} == {"w"}


def failing(problem: str, optimizer: str) -> tg.Program:
    """The step with an extra returned output that fails mid-call: a take whose index is
    element 0 of an input too large for the host checks plus 0 * (the new weight w's
    first element, truncated), so it runs after the update is computed."""
    made = PROBLEMS[problem]()
    kind, hyper = OPTIMIZERS[optimizer]
    step = tg.train_step_from_gradients(made.graph, getattr(tg.optim, kind)(**hyper))
    big = step.input("big", (HOST_LIMIT + 1,), tg.int32)
    new_w = tg.Tensor(step, step.state_updates["w"])
    first = tg.reshape(new_w, (-1,))[0:1] * 0.0
    index = tg.take(big, step.constant(np.int32(0)), 0) + tg.astype(tg.sum(first), tg.int32)
    step.output(tg.take(big, index, 0))
    return tg.compile(step)


@pytest.mark.parametrize("backend", ["numpy", "arena", "mlx"])
def test_a_failed_step_leaves_weights_and_optimizer_state_unchanged(backend):
    made = logistic()
    program = failing("logistic", "adamw-corrected")
    good = np.zeros(HOST_LIMIT + 1, np.int32)
    bad = np.full(HOST_LIMIT + 1, HOST_LIMIT + 7, np.int32)  # out of range for the take
    state = program.new_state(backend)
    program.run({**made.feeds, "big": good}, backend=backend, state=state)
    names = sorted(n.name for n in program.graph.states)
    before = {name: state[name] for name in names}
    with pytest.raises(tg.RunError, match=r"take: index \d+ is out of range"):
        program.run({**made.feeds, "big": bad}, backend=backend, state=state)
    for name in names:
        assert state[name].tobytes() == before[name].tobytes(), name
    # and the next step is the one that would have followed the first
    reference = program.new_state(backend)
    for _ in range(2):
        expected = program.run({**made.feeds, "big": good}, backend=backend, state=reference)
    got = program.run({**made.feeds, "big": good}, backend=backend, state=state)
    assert np.asarray(got[0]).tobytes() == np.asarray(expected[0]).tobytes()


def test_bad_gradient_graphs_are_named():
    made = least_squares()
    sgd = tg.optim.SGD(0.1)
    with pytest.raises(tg.GraphError, match=r"optimizer must be a tg\.optim optimizer"):
        tg.train_step_from_gradients(made.graph, "sgd")
    with pytest.raises(tg.GraphError, match=r"wrt names 'x', which is not a param"):
        tg.train_step_from_gradients(made.graph, sgd, wrt=["x", "b"])
    with pytest.raises(tg.GraphError, match="returns 3 outputs, but a loss and 1 gradients"):
        tg.train_step_from_gradients(made.graph, sgd, wrt=["w"])
    with pytest.raises(tg.GraphError, match="wrt names a param twice"):
        tg.train_step_from_gradients(made.graph, sgd, wrt=["w", "w"])
    with pytest.raises(tg.ShapeError, match=r"gradient %\d+ \w+ of param 'b' is \(3, 2\)"):
        tg.train_step_from_gradients(made.graph, sgd, wrt=["b", "w"])
    g = tg.Graph("vector_loss")
    w = g.param("w", (3,), value=np.ones(3, np.float32))
    g.output(w * 2.0, w)
    with pytest.raises(tg.ShapeError, match=r"the loss %\d+ mul has shape \(3,\), not a scalar"):
        tg.train_step_from_gradients(g, sgd)
    g = tg.Graph("unbound")
    w = g.param("w", (3,))
    g.output(tg.sum(w), w)
    with pytest.raises(tg.GraphError, match="param 'w' has no bound value"):
        tg.train_step_from_gradients(g, sgd)
    g = tg.Graph("int_loss")
    w = g.param("w", (3,), value=np.ones(3, np.float32))
    g.output(tg.argmax(w), w)
    with pytest.raises(tg.DTypeError, match=r"the loss %\d+ argmax is \w+, not float"):
        tg.train_step_from_gradients(g, sgd)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("optimizer", ["sgd-momentum", "adam-corrected", "adamw"])
def test_half_precision_weights_update_as_mlx_optimizers_do(optimizer, dtype):
    """Weights and gradients in a half type: every constant and cast where MLX puts it
    (the learning rate rounded to float32 then to the weight's dtype, the bias
    correction in float32 cast back), so the weights equal MLX's bit for bit."""
    import mlx.core as mx

    from tests.training.reference import mlx_optimizer

    kind, hyper = OPTIMIZERS[optimizer]
    half, mx_half = getattr(tg, dtype), getattr(mx, dtype)
    rng = np.random.default_rng(3)
    start = rng.standard_normal((4, 8)).astype(np.float32).astype(half.to_numpy())
    g = tg.Graph("half")
    w = g.param("w", (4, 8), half, value=start)
    g.output(tg.sum(tg.astype(w, tg.float32)), g.input("g", (4, 8), half))
    program = tg.compile(tg.train_step_from_gradients(g, getattr(tg.optim, kind)(**hyper)))

    def to_mx(array: np.ndarray) -> mx.array:  # MLX takes no NumPy bfloat16: via float32
        return mx.array(array.astype(np.float32)).astype(mx_half)

    mlx_optim, params = mlx_optimizer(kind, hyper), {"w": to_mx(start)}
    for _ in range(4):
        grad = (0.1 + rng.random((4, 8))).astype(np.float32).astype(half.to_numpy())
        program.run({"g": grad}, backend="numpy")
        params = mlx_optim.apply_gradients({"w": to_mx(grad)}, params)
    assert params["w"].dtype == mx_half
    expected = np.array(params["w"].astype(mx.float32)).astype(half.to_numpy())
    assert program.state("numpy")["w"].tobytes() == expected.tobytes()


def test_wrt_may_be_one_name_and_a_taken_state_name_or_a_state_update_is_named():
    made = least_squares()
    one = tg.Graph.from_nodes(
        "w_only", made.graph.nodes, made.graph.outputs[:2], made.graph.param_values
    )
    step = tg.train_step_from_gradients(one, tg.optim.SGD(0.1, momentum=0.9), wrt="w")
    assert {n.name for n in step.states} == {"w", "w.v"}
    g = tg.Graph("taken")
    w = g.param("w", (3,), value=np.ones(3, np.float32))
    g.output(tg.sum(w * g.input("w.m", (3,))), w)
    with pytest.raises(tg.GraphError, match=r"duplicate name 'w\.m'"):
        tg.train_step_from_gradients(g, tg.optim.Adam(0.1))
    g = tg.Graph("stateful")
    w = g.param("w", (3,), value=np.ones(3, np.float32))
    count = g.state("count", (), tg.int32)
    g.update_state(count, count + 1)
    g.output(tg.sum(w), w)
    with pytest.raises(tg.GraphError, match=r"updates states \(count\)"):
        tg.train_step_from_gradients(g, tg.optim.SGD(0.1))


@pytest.mark.slow  # about 2 s an example (a compile each); the fixed cases above run in CI
@settings(max_examples=12)
@given(hyperparameters(), st.sampled_from(sorted(PROBLEMS)))
def test_any_optimizer_step_runs_the_same_on_the_arena_as_the_reference(chosen, problem):
    """For random hyperparameters: 3 steps on the arena equal the reference interpreter
    bit for bit (losses, weights, moments, counter), and MLX within float32."""
    kind, hyper = chosen
    made = PROBLEMS[problem]()
    step = tg.train_step_from_gradients(made.graph, getattr(tg.optim, kind)(**hyper))
    program = tg.compile(step)
    losses, state = train(program, made.feeds, "numpy", steps=3)
    arena_losses, arena_state = train(program, made.feeds, "arena", steps=3)
    mlx_losses, mlx_state = train(program, made.feeds, "mlx", steps=3)
    assert [v.tobytes() for v in arena_losses] == [v.tobytes() for v in losses]
    for name in state.names:
        assert arena_state[name].tobytes() == state[name].tobytes(), name
        np.testing.assert_allclose(mlx_state[name], state[name], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.array(mlx_losses), np.array(losses), rtol=1e-5)


def test_a_step_without_expansion_keeps_fused_ops_and_trains_alike() -> None:
    # expand=False keeps gelu (tanh form) whole: the step differentiates it by its own
    # rule, so its forward has the gelu node, where the default step decomposes it (its
    # tanh kept for the backward); the losses agree (the same forward values, to
    # rounding: NumPy reference).
    g = tg.Graph("gelu_mlp")
    x = g.input("x", (4, 8), tg.float32)
    rng = np.random.default_rng(0)
    w = g.param("w", (8, 8), tg.float32, rng.standard_normal((8, 8)).astype(np.float32))
    g.output(tg.mean(tg.square(tg.gelu(x @ w, approximate="tanh"))))
    optimizer = tg.optim.SGD(learning_rate=0.1)
    kept = tg.train_step(g, optimizer=optimizer, expand=False)
    expanded = tg.train_step(g, optimizer=optimizer)
    assert "gelu" in {n.op for n in kept.nodes}
    assert "gelu" not in {n.op for n in expanded.nodes}
    feeds = {"x": rng.standard_normal((4, 8)).astype(np.float32)}
    losses = []
    for step in (kept, expanded):
        prog = tg.compile(step)
        state = prog.new_state("numpy")
        losses.append([float(prog.run(feeds, backend="numpy", state=state)[0]) for _ in range(3)])
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)
