"""Hypothesis strategies for the training tests."""

from hypothesis import strategies as st


@st.composite
def hyperparameters(draw: st.DrawFn) -> tuple[str, dict]:
    """(kind, keyword arguments) of a valid optimizer, every argument drawn."""
    kind = draw(st.sampled_from(["SGD", "Adam", "AdamW"]))
    lr = draw(st.floats(1e-4, 1.0))
    if kind == "SGD":
        # nonzero first: hypothesis favours the first choice of a sampled_from
        momentum = draw(st.sampled_from([draw(st.floats(0.01, 0.99)), 0.0]))
        dampening = draw(st.sampled_from([draw(st.floats(0.01, 0.9)), 0.0]))
        nesterov = momentum > 0 and dampening == 0 and draw(st.booleans())
        return kind, {
            "learning_rate": lr,
            "momentum": momentum,
            "weight_decay": draw(st.sampled_from([draw(st.floats(1e-4, 0.1)), 0.0])),
            "dampening": dampening,
            "nesterov": nesterov,
        }
    hyper = {
        "learning_rate": lr,
        "betas": (draw(st.floats(0.0, 0.99)), draw(st.floats(0.0, 0.999))),
        "eps": draw(st.floats(1e-8, 1e-3)),
        "bias_correction": draw(st.booleans()),
    }
    if kind == "AdamW":
        hyper["weight_decay"] = draw(st.floats(0.0, 0.1))
    return kind, hyper
