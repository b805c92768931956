"""Tied torch parameters (one tensor under several names: a shared token embedding, an
LM head tied to it) import as ONE graph param named by torch's canonical (first) name,
read by every use; equal values in separate tensors stay separate params."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed")

import tensorgraph as tg  # noqa: E402
from tensorgraph.importers.torch_compat import import_transformers  # noqa: E402
from tensorgraph.importers.torch_export import from_exported  # noqa: E402

BACKENDS = ("numpy", "arena", "mlx")
VOCAB, DIM, OUT = 11, 4, 3


class SharedEmbedding(torch.nn.Module):
    """T5's tie: two lookups (encoder, decoder) of one table, then a Linear."""

    def __init__(self, tied: bool = True) -> None:
        super().__init__()
        self.enc = torch.nn.Embedding(VOCAB, DIM)
        self.dec = torch.nn.Embedding(VOCAB, DIM)
        if tied:
            self.dec.weight = self.enc.weight
        else:  # equal values, separate tensors
            self.dec.weight.data.copy_(self.enc.weight.data)
        self.lin = torch.nn.Linear(DIM, OUT)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.lin(self.enc(x) * self.dec(y))


class TiedHead(torch.nn.Module):
    """GPT-2's tie: the LM head's weight is the token embedding."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, DIM)
        self.lin = torch.nn.Linear(DIM, DIM)
        self.head = torch.nn.Linear(DIM, VOCAB, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.lin(self.emb(x))))


def _tokens(seed: int, shape: tuple[int, ...] = (2, 5)) -> torch.Tensor:
    return torch.randint(0, VOCAB, shape, generator=torch.Generator().manual_seed(seed))


def _assert_matches_torch(
    graph: tg.Graph, module: torch.nn.Module, args: tuple, rtol: float = 1e-5
) -> None:
    feeds = {node.name: a.numpy() for node, a in zip(graph.inputs, args, strict=True)}
    with torch.no_grad():
        want = module(*args).numpy()
    prog = tg.compile(graph)
    for backend in BACKENDS:
        (got,) = prog.run(feeds, backend=backend)
        assert got.shape == want.shape and got.dtype == want.dtype, backend
        np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-5, err_msg=backend)


def _param_names(graph: tg.Graph) -> set[str]:
    return {n.name for n in graph.params}


def test_shared_embedding_imports_as_one_param_named_first() -> None:
    torch.manual_seed(0)
    module = SharedEmbedding().eval()
    args = (_tokens(1), _tokens(2))
    graph = tg.from_torch(module, args)
    names = _param_names(graph)
    assert "enc.weight" in names and "dec.weight" not in names
    np.testing.assert_array_equal(
        graph.param_values["enc.weight"], module.enc.weight.numpy(force=True)
    )
    # The table once (VOCAB x DIM float32), plus the Linear's weight (folded to its
    # transpose, same bytes) and bias.
    want_bytes = VOCAB * DIM * 4 + (DIM * OUT + OUT) * 4
    assert sum(v.nbytes for v in graph.param_values.values()) == want_bytes
    _assert_matches_torch(graph, module, args)


def test_both_aliases_read_in_the_program_still_give_one_param() -> None:
    # Non-strict export routes every use to the last alias and strict export to the
    # first; a program whose nodes read both placeholders (another export path) must
    # still give one param that both reads use.
    torch.manual_seed(0)
    module = SharedEmbedding().eval()
    args = (_tokens(3), _tokens(4))
    program = torch.export.export(module, args).run_decompositions()
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    used, unused = placeholders["p_dec_weight"], placeholders["p_enc_weight"]
    assert not unused.users, "torch 2.13 routes both lookups to the last alias"
    first_reader = next(iter(used.users))
    first_reader.replace_input_with(used, unused)
    assert used.users and unused.users
    graph = from_exported(program, "both", decompose=False)
    names = _param_names(graph)
    assert "enc.weight" in names and "dec.weight" not in names
    takes = [n for n in graph.nodes if n.op == "take"]
    table = next(n.id for n in graph.params if n.name == "enc.weight")
    assert len(takes) == 2 and all(n.inputs[0] == table for n in takes)
    _assert_matches_torch(graph, module, args)


def test_strict_export_names_the_param_the_same() -> None:
    torch.manual_seed(0)
    module = SharedEmbedding().eval()
    args = (_tokens(5), _tokens(6))
    graph = from_exported(torch.export.export(module, args, strict=True), "strict")
    assert "enc.weight" in _param_names(graph) and "dec.weight" not in _param_names(graph)
    _assert_matches_torch(graph, module, args)


def test_tied_lm_head_reads_the_embedding_param() -> None:
    torch.manual_seed(0)
    module = TiedHead().eval()
    args = (_tokens(7),)
    graph = tg.from_torch(module, args)
    names = _param_names(graph)
    assert "emb.weight" in names and "head.weight" not in names
    _assert_matches_torch(graph, module, args)


def test_equal_values_in_separate_tensors_stay_separate_params() -> None:
    torch.manual_seed(0)
    module = SharedEmbedding(tied=False).eval()
    assert module.enc.weight is not module.dec.weight
    assert torch.equal(module.enc.weight, module.dec.weight)
    args = (_tokens(8), _tokens(9))
    graph = tg.from_torch(module, args)
    assert {"enc.weight", "dec.weight"} <= _param_names(graph)
    want_bytes = 2 * VOCAB * DIM * 4 + (DIM * OUT + OUT) * 4
    assert sum(v.nbytes for v in graph.param_values.values()) == want_bytes
    _assert_matches_torch(graph, module, args)


def test_gradient_of_tied_param_is_torch_autograds_sum_over_uses() -> None:
    torch.manual_seed(0)
    module = SharedEmbedding().eval()
    args = (_tokens(10), _tokens(11))
    graph = tg.from_torch(module, args)
    out = graph.node(graph.outputs[0])
    weights = np.random.default_rng(0).uniform(-1, 1, out.shape).astype(np.float32)
    g = tg.Graph.from_nodes(graph.name, graph.nodes, [], graph.param_values)
    g.output((tg.Tensor(g, out.id) * g.constant(weights)).sum())
    feeds = {node.name: a.numpy() for node, a in zip(g.inputs, args, strict=True)}
    loss, grad = tg.compile(tg.value_and_grad(g, ["enc.weight"])).run(feeds, backend="numpy")
    module.zero_grad()
    want = (module(*args) * torch.tensor(weights)).sum()
    want.backward()
    assert float(loss) == pytest.approx(want.item(), rel=1e-5)
    expected = module.enc.weight.grad.numpy()
    assert grad.shape == expected.shape and grad.dtype == expected.dtype
    assert np.any(expected != 0), "both lookups reach the loss"
    np.testing.assert_allclose(grad, expected, rtol=1e-4, atol=1e-6)


def _transformers_case(name: str) -> tuple[torch.nn.Module, tuple, str, str]:
    """A tiny transformers model with tied word embeddings, its tokens, the tie's
    canonical name and its alias."""
    transformers = import_transformers()
    torch.manual_seed(0)
    if name == "gpt2":
        config = transformers.GPT2Config(
            vocab_size=100, n_positions=32, n_embd=16, n_layer=1, n_head=2, use_cache=False
        )
        model, canonical, alias = transformers.GPT2LMHeadModel(config), "transformer.wte", "lm_head"
    else:
        config = transformers.T5Config(
            vocab_size=100, d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2
        )
        model, canonical, alias = (
            transformers.T5EncoderModel(config),
            "shared",
            "encoder.embed_tokens",
        )

    class Head(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            result = self.model(tokens)
            return result.logits if name == "gpt2" else result.last_hidden_state

    tokens = torch.randint(0, 100, (1, 8), generator=torch.Generator().manual_seed(1))
    return Head().eval(), (tokens,), f"model.{canonical}.weight", f"model.{alias}.weight"


@pytest.mark.parametrize("name", ["gpt2", "t5"])
def test_transformers_tied_embeddings_import_as_one_param(name: str) -> None:
    module, args, canonical, alias = _transformers_case(name)
    tied = dict(module.named_parameters(remove_duplicate=False))
    assert tied[canonical] is tied[alias]
    graph = tg.from_torch(module, args)
    names = _param_names(graph)
    assert canonical in names and alias not in names
    _assert_matches_torch(graph, module, args, rtol=1e-4)


def test_tied_lm_head_trains_as_torch_adamw(monkeypatch: pytest.MonkeyPatch) -> None:
    """10 AdamW steps of the tied LM head (imported unfolded, as
    tests/training/test_torch_training.py trains imported models) give torch's losses:
    the one param takes the summed gradient of both uses, as torch's Parameter does."""
    from tests.training.test_torch_training import _train_both, _unfolded

    _unfolded(monkeypatch)
    torch.manual_seed(0)
    ours, theirs = _train_both(TiedHead(), "cross_entropy", (_tokens(12),))
    assert theirs[-1] < theirs[0]  # the run really trains: the comparison is not vacuous
    np.testing.assert_allclose(ours, theirs, rtol=1e-4)
