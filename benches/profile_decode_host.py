"""Host work per decode token, without a profiler's inflation: tensorgraph's `generate`
against bench_decode_families' compiled hand-written loop, synchronous and pipelined
(mlx-lm's `generate_step`: the pick stays on the device, step t + 1 is queued before
token t is read), at the bench's default size.

tensorgraph runs twice: `generate` as it is, and its synchronous loop (the one a
sampler that draws on the host keeps; in a checkout before the pipelined loop both rows
are that loop). For each contender, per decode token (best of `--rounds` interleaved rounds after 3
warm-up rounds, each 64 tokens): `wall`, the loop's wall time; `mlx`, the time the host
spent inside MLX's evaluation calls (mx.eval, mx.async_eval, and the wait for a token
read back: each loop here evaluates explicitly before it reads, so that wait is counted);
`host` = wall - mlx: Python and MLX graph building outside evaluation (feeds, checks,
conversions, the compiled call that replays a trace, the pick); and `cpu`, the calling
thread's CPU time (time.thread_time: host work plus MLX's dispatch on that thread, not
the kernels, which MLX's CPU backend runs on its own threads, nor time spent waiting or
descheduled), the figure other jobs on the machine move least. On the MLX CPU backend,
mx.async_eval itself blocks while it dispatches a step's kernels, so `mlx` is most of
`wall`, pipelined or not. `--profile` adds a cProfile of one tensorgraph `generate`.

    PYTHONPATH=. python benches/profile_decode_host.py [--families llama,qwen2,gemma2]
        [--rounds 7] [--profile] [--device cpu|gpu]

It also prints how many MLX primitives each side dispatches per decode step (the
compiled graphs' nodes, fused kernels once): on a GPU, where a small model's step is
bound by dispatch, that count is the first suspect.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

import mlx.core as mx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_decode_families as bench

import tensorgraph as tg
from tensorgraph.codegen_mlx.arrays import MX_DTYPES
from tensorgraph.importers.generation import from_torch_generation
from tensorgraph.models import generation
from tensorgraph.models.generation import generate

TOKENS = 64
WAITED = [0.0]  # seconds inside MLX evaluation since the last reset


def _timed(function: object) -> object:
    def timed(*args: object, **kwargs: object) -> object:
        began = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            WAITED[0] += time.perf_counter() - began

    return timed


def _instrument() -> None:
    """Count every mx.eval / mx.async_eval (the executor and the loops call them through
    the module), and make the pipelined loop's token read evaluate explicitly first."""
    mx.eval, mx.async_eval = _timed(mx.eval), _timed(mx.async_eval)
    try:
        from tensorgraph.models import decode_pipeline
    except ImportError:  # a checkout before the pipelined loop: nothing to patch
        return
    read = decode_pipeline._read

    def evaluated(pending: tuple) -> tuple:
        mx.eval(pending[1])
        return read(pending)

    decode_pipeline._read = evaluated


def run_tg(
    program: object, prompt: np.ndarray, pipeline: bool = True
) -> tuple[np.ndarray, float, float]:
    """(tokens, decode wall s, s inside MLX evaluation during decode) of one `generate`;
    `pipeline` False: its synchronous loop (what it runs for a sampler that draws)."""
    mark: list[float] = []
    pipelines = getattr(generation, "pipelines_greedy", None)
    if not pipeline and pipelines is not None:
        generation.pipelines_greedy = lambda *args: False

    def on_token(_token: np.ndarray) -> None:
        if not mark:  # token 0 comes from the prefill, before the decode loop starts
            mark.extend((WAITED[0], time.thread_time()))

    WAITED[0] = 0.0
    try:
        result = generate(program, prompt, TOKENS, backend="mlx", on_token=on_token)
    finally:
        if pipelines is not None:
            generation.pipelines_greedy = pipelines
    cpu = time.thread_time() - mark[1]
    return result.tokens, result.decode_seconds, WAITED[0] - mark[0], cpu


def run_hand(hand: object, prompt: np.ndarray, pipeline: bool) -> tuple[np.ndarray, float, float]:
    """(tokens, decode wall s, s inside MLX evaluation) of the compiled hand-written loop,
    synchronous (the bench's: argmax of each step's logits read at once) or pipelined."""
    hand.reset()
    token = mx.argmax(hand.prefill(prompt), axis=-1)
    out = [np.array(token, np.int32)]
    positions = range(prompt.shape[1], prompt.shape[1] + TOKENS - 1)
    WAITED[0] = 0.0
    began, cpu = time.perf_counter(), time.thread_time()
    pending = None
    for pos in positions:
        token = mx.argmax(hand.decode(token.reshape(-1, 1), pos), axis=-1)
        if pipeline:
            mx.async_eval(token)
            if pending is not None:
                mx.eval(pending)
                out.append(np.array(pending, np.int32))
            pending = token
        else:
            mx.eval(token)
            out.append(np.array(token, np.int32))
    if pending is not None:
        mx.eval(pending)
        out.append(np.array(pending, np.int32))
    wall, cpu = time.perf_counter() - began, time.thread_time() - cpu
    return np.stack(out, axis=1), wall, WAITED[0], cpu


def _count(outputs: list[mx.array]) -> int:
    """The primitives of the lazy graph behind `outputs` (mx.export_to_dot's nodes)."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "graph.dot"
        mx.export_to_dot(str(path), *outputs)
        return path.read_text().count("shape=rectangle")


def primitives(program: object, hand: object) -> dict[str, int]:
    """Primitives MLX dispatches for one decode step after mx.compile (fused kernels
    count once; on a GPU `mx.fast` ops are one each): tensorgraph's decode entry (its
    segments' traces, fed zeros) and the hand-written compiled step."""
    from tensorgraph.codegen_mlx import executor

    entry = program.entries["decode"]
    graph = entry.graph
    zeros = {n.id: mx.zeros(n.shape, MX_DTYPES[n.dtype.name]) for n in graph.nodes}
    mx.eval(list(zeros.values()))  # evaluated: only the step's own primitives are counted
    segments, traces = executor._segmented(entry, mx.default_device())
    ours = 0
    for segment, trace in zip(segments, traces, strict=True):
        if trace is not None:
            ours += _count(trace(*[zeros[i] for i in segment.inputs]))
    token, position = mx.zeros((1, 1), mx.int32), mx.array([bench.BUCKET])
    mx.eval(hand.caches, token, position)
    return {"tensorgraph": ours, "hand-written": _count(hand.step(token, position, *hand.caches))}


def measure(family: str, rounds: int, profile: bool) -> None:
    model = bench.build_model(family, "default")
    entries = from_torch_generation(model, max_seq=bench.MAX_SEQ, prompt_buckets=(bench.BUCKET,))
    program = tg.compile(entries)
    prompt = np.random.default_rng(0).integers(3, 500, (1, 20)).astype(np.int32)
    hand = bench.DecoderLM(model, bench.MAX_SEQ)
    runs = {
        "tensorgraph generate": lambda: run_tg(program, prompt),
        "tensorgraph synchronous": lambda: run_tg(program, prompt, pipeline=False),
        "hand compiled": lambda: run_hand(hand, prompt, False),
        "hand compiled pipelined": lambda: run_hand(hand, prompt, True),
    }
    for _ in range(3):
        for run in runs.values():
            run()
    best: dict[str, list[float]] = {name: [np.inf] * 4 for name in runs}
    tokens = {}
    for _ in range(rounds):
        for name, run in runs.items():
            tokens[name], wall, waited, cpu = run()
            figures = (wall, waited, wall - waited, cpu)
            best[name] = [min(a, b) for a, b in zip(best[name], figures, strict=True)]
    agree = len({t.tobytes() for t in tokens.values()}) == 1
    print(f"{family}: MLX primitives per decode step: {primitives(program, hand)}")
    steps = TOKENS - 1
    verdict = "yes" if agree else "NO"
    print(f"{family}: ms per decode token, best of {rounds} (tokens agree: {verdict})")
    print(f"  {'contender':<26} {'wall':>7} {'mlx':>7} {'host':>7} {'cpu':>7}")
    for name, figures in best.items():
        wall, waited, host, cpu = (1e3 * seconds / steps for seconds in figures)
        print(f"  {name:<26} {wall:>7.3f} {waited:>7.3f} {host:>7.3f} {cpu:>7.3f}")
    if profile:
        profiler = cProfile.Profile()
        profiler.enable()
        generate(program, prompt, TOKENS, backend="mlx")
        profiler.disable()
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--families", default="llama,qwen2,gemma2")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    args = parser.parse_args()
    mx.set_default_device(mx.cpu if args.device == "cpu" else mx.gpu)
    _instrument()
    for family in args.families.split(","):
        measure(family, args.rounds, args.profile)


if __name__ == "__main__":
    main()
