"""An inference graph and its training step compiled together: the weights are states
of one region that "train" updates and "infer" reads (no copy), and save/load with the
State resumes a run exactly."""

import numpy as np
import pytest

import tensorgraph as tg
from tensorgraph.planner.report import copied_states
from tests.training.reference import least_squares

N, D, K = 8, 3, 2


def infer_graph(values: dict) -> tg.Graph:
    """The prediction x @ w + b of the least-squares problem, its weights bound."""
    g = tg.Graph("infer")
    x = g.input("x", (N, D))
    w, b = g.param("w", (D, K), value=values["w"]), g.param("b", (K,), value=values["b"])
    g.output(x @ w + b)
    return g


def program(optimizer: tg.optim.Optimizer | None = None) -> tuple:
    made = least_squares(N, D, K)
    step = tg.train_step_from_gradients(
        made.graph, optimizer or tg.optim.Adam(0.05, bias_correction=True)
    )
    return made, tg.compile({"infer": infer_graph(made.initial), "train": step})


@pytest.mark.parametrize("backend", ["numpy", "arena", "mlx"])
def test_infer_after_train_reads_the_trained_weights(backend):
    made, multi = program()
    infer, train = multi.entries["infer"], multi.entries["train"]
    assert not infer.graph.params and not train.graph.params  # no weight is a constant
    assert {n.name for n in infer.graph.states} == {"w", "b"}
    assert infer.plan.state_layout == train.plan.state_layout  # one offset per weight
    x = {"x": made.feeds["x"]}
    before = multi.run("infer", x, backend=backend)[0]
    for _ in range(3):
        multi.run("train", made.feeds, backend=backend)
    after = multi.run("infer", x, backend=backend)[0]
    state = multi.state(backend)
    trained = {"w": state["w"], "b": state["b"]}
    assert not np.array_equal(trained["w"], made.initial["w"])
    # the oracle: the inference graph compiled alone with the trained weights bound
    alone = tg.compile(infer_graph(made.initial)).run(x, backend=backend)[0]
    np.testing.assert_array_equal(before, alone)
    expected = tg.compile(infer_graph(trained)).run(x, backend=backend)[0]
    np.testing.assert_array_equal(after, expected)


def test_the_weights_live_once():
    made, multi = program()
    weights = sum(v.nbytes for v in made.initial.values())
    moments = 2 * weights
    train = multi.entries["train"].graph
    assert sorted(n.name for n in train.states) == sorted(
        ["w", "b", "w.m", "w.v", "b.m", "b.v", "optimizer.step"]
    )
    # the state region holds the weights, moments and counter once, each 64-aligned
    assert weights + moments + 4 <= multi.state_size <= weights + moments + 4 + 7 * 63
    # every new weight, moment and count is written in place into its state's bytes
    assert copied_states(multi.entries["train"].plan, train) == []
    for entry in multi.entries.values():  # no weight is in the constant segment
        assert not entry.graph.params
        assert all(n.shape == () for n in entry.graph.boundary("constant"))  # the scalars


@pytest.mark.parametrize("backend", ["numpy", "arena"])
def test_save_and_load_resume_training_bit_for_bit(backend, tmp_path):
    made, multi = program(tg.optim.AdamW(0.05, bias_correction=True))
    straight = multi.new_state(backend)
    losses = [multi.run("train", made.feeds, backend=backend, state=straight)[0] for _ in range(5)]
    resumed = multi.new_state(backend)
    for _ in range(3):
        multi.run("train", made.feeds, backend=backend, state=resumed)
    multi.save(tmp_path / "run.tgp", state=resumed)
    loaded = tg.load(tmp_path / "run.tgp")
    again = [loaded.run("train", made.feeds, backend=backend)[0] for _ in range(2)]
    assert [np.asarray(v).tobytes() for v in again] == [np.asarray(v).tobytes() for v in losses[3:]]
    state = loaded.state(backend)
    for name in straight.names:
        assert state[name].tobytes() == straight[name].tobytes(), name
    served = loaded.run("infer", {"x": made.feeds["x"]}, backend=backend)[0]
    expected = multi.run("infer", {"x": made.feeds["x"]}, backend=backend, state=straight)[0]
    assert served.tobytes() == expected.tobytes()


def test_an_inference_graph_that_disagrees_with_the_step_is_named():
    made = least_squares(N, D, K)
    step = tg.train_step_from_gradients(made.graph, tg.optim.SGD(0.1))
    other = infer_graph({"w": made.initial["w"] + 1, "b": made.initial["b"]})
    with pytest.raises(tg.GraphError, match=r"entry 'infer': param 'w' is bound to other values"):
        tg.compile({"infer": other, "train": step})
    g = tg.Graph("wide")
    g.output(g.input("x", (N, D + 1)) @ g.param("w", (D + 1, K)))
    with pytest.raises(tg.GraphError, match=r"param 'w' \(\(4, 2\) float32\) cannot read state"):
        tg.compile({"infer": g, "train": step})
