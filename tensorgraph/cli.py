"""The `tensorgraph` command: models, compile, run, plan-csv, generate, demo and train
(tensorgraph/cli_train.py).

Exit codes: 0 success, 1 a failed numeric check, 2 bad usage. Bad usage is reported in
one line on stderr (`tensorgraph: error: ...`, or `tensorgraph: PlanError: ...` for a
TensorGraphError), never a traceback. Values are checked where they enter: argparse
types refuse a bad seed, alignment or output path before any work starts, model configs
refuse bad sizes by name. `main` still turns an OSError (a file that cannot be written
after all) or a MemoryError (a config too large for this machine) into one line.

Seeds are non-negative ints, as NumPy's generators take them; a negative seed is
refused rather than silently mapped onto another one.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from attrs import frozen

from tensorgraph.compiler import DEFAULT_PASSES, PASS_ALIASES, Program, compile
from tensorgraph.errors import TensorGraphError

BACKENDS = ("mlx", "numpy", "arena")

# Largest error allowed, relative to the largest magnitude of the expected output (at
# least 1), per output dtype: a few units in the last place of each float type after a
# deep model's accumulated rounding. Integer and bool outputs must match exactly.
TOLERANCES = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 5e-2}


class UsageError(Exception):
    """Bad command-line usage: reported in one line, exit code 2."""


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's help ends with its default (`off` for a switch), unless the help
    text already says it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, argparse.SUPPRESS):
            return text
        if action.nargs == 0 and action.default is False:  # a store_true switch
            return f"{text} (default: off)"
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # one line, exit 2, no usage dump
        raise UsageError(message)


@frozen
class Comparison:
    """Outputs against expected ones: the worst absolute and relative (to the largest
    expected magnitude) errors over all outputs, and whether each output is in tolerance."""

    max_abs: float
    max_rel: float
    ok: bool

    def __str__(self) -> str:
        verdict = "OK" if self.ok else "MISMATCH"
        return f"max abs error {self.max_abs:.3g}, max rel error {self.max_rel:.3g}: {verdict}"


def compare(outputs: Sequence[np.ndarray], expected: Sequence[np.ndarray]) -> Comparison:
    """Compare output by output; a different count, shape or dtype, or a NaN where the
    expected value is not NaN, fails the check. Tolerances come from TOLERANCES."""
    if len(outputs) != len(expected):
        return Comparison(float("inf"), float("inf"), False)
    worst_abs, worst_rel, ok = 0.0, 0.0, True
    for got, want in zip(outputs, expected, strict=True):
        if got.shape != want.shape or got.dtype != want.dtype:
            return Comparison(float("inf"), float("inf"), False)
        g, w = got.astype(np.float64), want.astype(np.float64)
        if not np.array_equal(np.isnan(g), np.isnan(w)):
            return Comparison(float("nan"), float("nan"), False)
        finite = ~np.isnan(w)
        error = float(np.max(np.abs(g - w)[finite], initial=0.0))
        scale = max(float(np.max(np.abs(w)[finite], initial=0.0)), 1.0)
        worst_abs, worst_rel = max(worst_abs, error), max(worst_rel, error / scale)
        ok = ok and error <= TOLERANCES.get(str(want.dtype), 0.0) * scale
    return Comparison(worst_abs, worst_rel, ok)


def _progress(step: int, total: int, text: str) -> None:
    print(f"[{step}/{total}] {text}", flush=True)


def _parse_value(raw: str) -> object:
    """int, then float, then true/false, else the text itself (a dtype name)."""
    for parse in (int, float):
        try:
            return parse(raw)
        except ValueError:
            continue
    return {"true": True, "false": False}.get(raw, raw)


def _config(pairs: Sequence[str]) -> dict[str, object]:
    """`k=v` pairs as a dict of config overrides (UsageError names a malformed pair)."""
    config: dict[str, object] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key or not raw:
            raise UsageError(f"--config expects key=value but got {pair!r}")
        config[key] = _parse_value(raw)
    return config


def _build(name: str, pairs: Sequence[str]):
    from tensorgraph.models import ZOO, build_model

    if name not in ZOO:
        raise UsageError(f"unknown model {name!r}; choose one of: {', '.join(ZOO)}")
    return build_model(name, **_config(pairs))


def _passes(args: argparse.Namespace) -> tuple[str, ...]:
    off = {p.replace("-", "_") for p in args.no or ()}
    off = {PASS_ALIASES.get(p, p) for p in off}
    unknown = off - set(DEFAULT_PASSES)
    if unknown:
        raise UsageError(f"unknown pass(es) {sorted(unknown)}; passes: {', '.join(DEFAULT_PASSES)}")
    return tuple(p for p in DEFAULT_PASSES if p not in off)


def _compile(
    args: argparse.Namespace, alignment: int = 64, notes: list | None = None
) -> tuple[object, Program]:
    model = _build(args.model, args.config)
    prog = compile(
        _precision(args, model.graph, notes),
        passes=_passes(args),
        planner=args.algorithm,
        alignment=alignment,
        schedule=args.schedule,
    )
    return model, prog


def _summary(prog: Program, alignment: int) -> str:
    """The plan against the lower bound and the baselines (naive and greedy_size planned
    on the very same buffers). Follows the program's header or full report, so it
    repeats none of their lines; byte counts carry thousands separators, as there."""
    from tensorgraph.planner.assign import assign_offsets
    from tensorgraph.planner.report import human

    plan = prog.plan
    buffers = plan.buffers
    naive = assign_offsets(buffers, "naive", alignment).arena_size
    greedy = assign_offsets(buffers, "greedy_size", alignment).arena_size
    arena = max(plan.arena_size, 1)
    lines = [
        "summary:",
        f"  buffers          {len(buffers):>12,}",
        f"  arena            {plan.arena_size:>12,} B  {human(plan.arena_size)} ({plan.algorithm})",
        f"  lower bound      {plan.lower_bound:>12,} B  ratio {plan.ratio:.3f}",
        f"  naive            {naive:>12,} B  {naive / arena:.2f}x arena",
        f"  greedy_size      {greedy:>12,} B  {greedy / arena:.3f}x arena",
        f"  constant segment {plan.constant_size:>12,} B  {human(plan.constant_size)}",
        f"  planning time    {plan.planning_seconds * 1000:>12,.1f} ms",
    ]
    return "\n".join(lines)


def cmd_models(args: argparse.Namespace) -> int:
    import textwrap

    import attrs

    from tensorgraph.models import ZOO

    print(f"{'model':<14} {'params':>12}  description")
    indent = " " * 29
    for name, entry in ZOO.items():
        print(f"{name:<14} {entry.build().param_count:>12,}  {entry.description}")
        defaults = " ".join(f"{k}={v}" for k, v in attrs.asdict(entry.config()).items())
        print(
            textwrap.fill(
                defaults,
                100,
                initial_indent=indent + "--config ",
                subsequent_indent=indent + " " * 9,
            )
        )
    return 0


def cmd_compile(args: argparse.Namespace) -> int:
    from tensorgraph.planner.report import format_program_header

    notes: list[str] = []
    _, prog = _compile(args, args.alignment, notes)
    for note in notes:
        print(note)
    # The full report starts with the header: one or the other, so no line shows twice.
    print(prog.report() if args.report else format_program_header(prog))
    if not args.report:  # the full report ends with it
        print(prog.memory().table())
    print(_summary(prog, args.alignment))
    if args.json:
        Path(args.json).write_text(prog.plan.to_json())
        print(f"plan JSON written to {args.json}")
    if args.plot:
        from tensorgraph.planner.timeline import plot_timeline

        path = plot_timeline(prog.plan, prog.graph, args.plot, show_state=args.plot_state)
        print(f"timeline plot written to {path}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from tensorgraph.runtime.reference import run_reference

    model, prog = _compile(args)
    inputs = _typed_inputs(prog.source, model.inputs(args.seed))
    expected = run_reference(prog.source, inputs)
    began = time.perf_counter()
    prog.run(inputs, backend=args.backend)  # the first run sets up the backend (MLX)
    first = time.perf_counter() - began
    began = time.perf_counter()
    outputs = prog.run(inputs, backend=args.backend)
    seconds = time.perf_counter() - began
    check = compare(outputs, expected)
    print(
        f"{args.model} on {args.backend}: {seconds * 1000:.1f} ms per run (first run "
        f"{first * 1000:.1f} ms); {check} vs the reference interpreter"
    )
    return 0 if check.ok else 1


def cmd_plan_csv(args: argparse.Namespace) -> int:
    """Plan a MiniMalloc CSV with --algorithm, or, with --capacity, decide by exact search
    whether it fits that capacity (exit 0 when it does, 1 when it does not or the budget
    ran out first). Either way the offsets are verified before anything is written.

    The arena printed is the plan's top (offset + size, unaligned), so the lower bound
    printed beside it is `arena_bound`, a bound on that same top under the alignment
    (the aligned live-bytes sum overstates it: one 10-byte buffer at alignment 64 needs
    10 bytes, not 64)."""
    from tensorgraph.planner.assign import assign_offsets
    from tensorgraph.planner.buffers import read_minimalloc_csv
    from tensorgraph.planner.certificate import CertifiedAssignment, arena_bound
    from tensorgraph.planner.verify import verify_assignment

    path = Path(args.file)
    if path.is_dir():
        raise UsageError(f"{path} is a directory, not a MiniMalloc CSV file")
    if not path.is_file():
        raise UsageError(f"no such file: {path}")
    buffers = read_minimalloc_csv(path)
    bound = arena_bound(buffers, args.alignment)
    progress = _StderrProgress(time.perf_counter())
    if args.capacity is not None:
        return _plan_csv_capacity(args, path, buffers, progress)
    plan = assign_offsets(
        buffers,
        args.algorithm,
        args.alignment,
        args.budget,
        time_limit=args.time_limit,
        progress=progress,
    )
    seconds = time.perf_counter() - progress.began
    verify_assignment(buffers, plan, args.alignment)
    ratio = plan.arena_size / bound if bound else 1.0
    print(
        f"{path.name}: {len(buffers)} buffers, arena {plan.arena_size:,}, lower bound "
        f"{bound:,}, ratio {ratio:.4f}, {args.algorithm} in {seconds:.3f} s, "
        f"work {plan.work:,} units{_cut_note(plan.cut_short)} (verified)"
    )
    if isinstance(plan, CertifiedAssignment):
        print(f"certificate: {plan.certificate}")
    parts = path.name.split(".")
    if len(parts) >= 3 and parts[-2].isdigit():
        capacity = int(parts[-2])
        verdict = "fits" if plan.arena_size <= capacity else "does not fit"
        print(f"capacity {capacity:,} (from the file name): {verdict}")
    if args.out:
        _write_plan(args.out, buffers, plan)
    return 0


def _plan_csv_capacity(
    args: argparse.Namespace, path: Path, buffers: list, progress: _StderrProgress
) -> int:
    """The --capacity mode of plan-csv: MiniMalloc's decision problem. The capacity
    bounds every buffer's aligned extent (offset + size rounded up to the alignment), so
    above alignment 1 the bound on those (aligned sizes summed) is printed beside the
    bound on the arena, the unaligned top printed when it fits."""
    from tensorgraph.planner.buffers import Assignment, lower_bound, write_minimalloc_csv
    from tensorgraph.planner.certificate import arena_bound
    from tensorgraph.planner.search import search_offsets
    from tensorgraph.planner.verify import verify_assignment

    progress(f"exact search at capacity {args.capacity:,}")
    result = search_offsets(
        buffers,
        args.capacity,
        args.alignment,
        args.budget,
        time_limit=args.time_limit,
        progress=progress,
    )
    seconds = time.perf_counter() - progress.began
    bound = arena_bound(buffers, args.alignment)
    extents = lower_bound(buffers, args.alignment)
    aligned = f" ({extents:,} for aligned extents)" if args.alignment > 1 else ""
    head = (
        f"{path.name}: {len(buffers)} buffers, lower bound {bound:,}{aligned}, "
        f"capacity {args.capacity:,}:"
    )
    tail = f"exact search in {seconds:.3f} s, work {result.work:,} units"
    tail += _cut_note(result.cut_short)
    if result.offsets is None:
        verdict = "does not fit (proven)" if result.proven_infeasible else "undecided"
        more = "" if result.proven_infeasible or result.cut_short else " (budget spent)"
        print(f"{head} {verdict}, {tail}{more}")
        return 1
    top = max((result.offsets[b.id] + b.size for b in buffers), default=0)
    plan = Assignment(result.offsets, top, result.work, result.cut_short)
    verify_assignment(buffers, plan, args.alignment)
    print(f"{head} fits, arena {top:,}, {tail} (verified)")
    if args.out:
        _write_plan(args.out, buffers, plan)
    else:
        write_minimalloc_csv(sys.stdout, buffers, plan)
    return 0


def _write_plan(out: str, buffers: list, plan: object) -> None:
    from tensorgraph.planner.buffers import write_minimalloc_csv

    write_minimalloc_csv(out, buffers, plan)
    print(f"offsets written to {out} (id,lower,upper,size,offset)")


def _cut_note(cut_short: bool) -> str:
    return ", cut short by --time-limit" if cut_short else ""


class _StderrProgress:
    """plan-csv's progress callback: lines on stderr, once the run has lasted
    PROGRESS_AFTER seconds (short runs stay quiet). Display only: the plan never
    depends on it."""

    def __init__(self, began: float) -> None:
        self.began = began

    def __call__(self, line: str) -> None:
        elapsed = time.perf_counter() - self.began
        if elapsed >= PROGRESS_AFTER:
            print(f"tensorgraph: {elapsed:6.1f} s  {line}", file=sys.stderr, flush=True)


PROGRESS_AFTER = 1.0  # seconds before plan-csv starts printing progress


def _work_units(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(
            f"expects a positive int or 0 (work units) but got {text!r}"
        )
    return value


def _power_of_two(text: str) -> int:
    """An alignment: a power of two (1, 2, 4, ... bytes)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1 or value & (value - 1):
        raise argparse.ArgumentTypeError(f"expects a power of two (bytes) but got {text!r}")
    return value


def _capacity_bytes(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < 1 << 63:
        raise argparse.ArgumentTypeError(
            f"expects a number of bytes in [0, 2**63) but got {text!r}"
        )
    return value


def cmd_demo(args: argparse.Namespace) -> int:
    from tensorgraph.codegen_mlx import blas_info
    from tensorgraph.models import build_model
    from tensorgraph.runtime.reference import run_reference

    out = Path(args.out)
    began = time.perf_counter()
    _progress(1, 4, "compiling llama (passes, schedule, memory plan) ...")
    model = build_model("llama")
    prog = compile(model.graph)
    print(prog.report())
    _progress(2, 4, f"running on MLX ({blas_info()}) ...")
    inputs = model.inputs(0)
    mlx_began = time.perf_counter()
    outputs = prog.run(inputs, backend="mlx")
    mlx_seconds = time.perf_counter() - mlx_began
    _progress(3, 4, "checking against the NumPy reference interpreter ...")
    check = compare(outputs, run_reference(prog.source, inputs))
    print(f"  MLX run {mlx_seconds:.2f} s; {check}", flush=True)
    _progress(4, 4, "plotting the memory timeline ...")
    try:
        from tensorgraph.planner.timeline import plot_timeline

        path = plot_timeline(prog.plan, prog.graph, out / "llama_memory_timeline.png")
        print(f"  timeline plot: {path.resolve()}")
    except TensorGraphError as err:  # no matplotlib: say how to get it, finish the rest
        print(f"  no plot: {err}")
    print(f"done in {time.perf_counter() - began:.1f} s")
    return 0 if check.ok else 1


GENERATE_MODELS = ("llama", "hf-llama")
PREFILL_BUCKETS = (32, 128, 512)  # generate's default prefill buckets


def _buckets(text: str) -> tuple[int, ...]:
    """Prefill buckets: comma-separated positive ints, e.g. 32,128,512."""
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(
            f"expects comma-separated positive ints (e.g. 32,128,512) but got {text!r}"
        )
    return tuple(sorted(set(values)))


@frozen
class _GenerationModel:
    """What `generate` runs and checks: the entries, the vocabulary size, and the
    expected token ids (batch, tokens) for a prompt (n,), named by `oracle`."""

    entries: dict
    vocab: int
    expected: object
    oracle: str


def _zoo_llama(args: argparse.Namespace, buckets: tuple[int, ...]) -> _GenerationModel:
    from tensorgraph.models.generation import llama_generation, llama_weights, reference_generate
    from tensorgraph.models.llama import LlamaConfig

    config = LlamaConfig()
    kv = {"kv_bits": args.kv_bits, "kv_group_size": args.kv_group_size}
    entries = llama_generation(
        config,
        max_seq=args.max_seq,
        buckets=buckets,
        seed=args.seed,
        prefill=args.prefill,
        **kv,
    )
    weights = llama_weights(config, args.seed)
    if _converted(args):  # the oracle is then the reference interpreter (cmd_generate)
        return _GenerationModel(_precision(args, entries), config.vocab, None, "")

    def expected(prompt: np.ndarray, tokens: int) -> np.ndarray:
        return reference_generate(config, weights, prompt, tokens, **kv).tokens

    return _GenerationModel(entries, config.vocab, expected, "the NumPy reference")


HF_LLAMA = {  # a small transformers LlamaConfig: grouped-query heads, random weights
    "vocab_size": 128,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}


# The sizes `hf:<model_type>` shrinks a family's default config to, where the config
# has the field (gpt2's n_embd and the like are reached through transformers'
# attribute maps): small, but every structure of the family kept (grouped-query heads,
# experts, norms, rotary variants), so what needs importing is what the full model has.
HF_SMALL = {
    "vocab_size": 128,
    "hidden_size": 128,
    "intermediate_size": 256,
    "ffn_hidden_size": 256,  # Falcon's name for it (18,176 by default)
    "ffn_dim": 256,  # OPT's (3,072 by default)
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_kv_heads": 2,  # Falcon's name for it (71 by default)
    "rotary_dim": 16,  # GPT-J, CodeGen (64 by default, past head_dim)
    "head_dim": 32,  # MLX's smallest quantization group, so --kv-bits can take the cache
    "num_local_experts": 4,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 64,
    "shared_expert_intermediate_size": 64,
    "sliding_window": 8,  # below any --max-seq worth a run: the cache's ring wraps
    "pad_token_id": 0,
    "bos_token_id": 1,
    "eos_token_id": 2,
}


def _generate_model(text: str) -> str:
    """MODEL of `generate`: llama, hf-llama or hf:<model_type>."""
    if text in GENERATE_MODELS or (text.startswith("hf:") and len(text) > 3):
        return text
    raise argparse.ArgumentTypeError(
        f"expects llama, hf-llama or hf:<model_type> (e.g. hf:qwen2) but got {text!r}"
    )


def _hf_config(transformers: object, args: argparse.Namespace) -> object:
    """The transformers config of `args.model`: hf-llama's fixed small LlamaConfig, or
    the family's default config shrunk to HF_SMALL (UsageError naming an unknown
    model_type)."""
    if args.model == "hf-llama":
        return transformers.LlamaConfig(**HF_LLAMA, max_position_embeddings=args.max_seq)
    model_type = args.model.removeprefix("hf:")
    try:
        config = transformers.AutoConfig.for_model(model_type)
    except ValueError as err:
        raise UsageError(f"unknown transformers model_type {model_type!r}") from err
    for field, value in {**HF_SMALL, "max_position_embeddings": args.max_seq}.items():
        derived = isinstance(getattr(type(config), field, None), property)  # Falcon's head_dim
        if hasattr(config, field) and getattr(config, field) is not None and not derived:
            setattr(config, field, value)
    return config


def _hf_model(args: argparse.Namespace, buckets: tuple[int, ...]) -> _GenerationModel:
    """hf-llama or hf:<model_type>: a transformers causal LM from a small config with
    seeded random weights, imported by from_torch_generation."""
    name = args.model
    try:
        import torch

        from tensorgraph.importers.generation import from_torch_generation
        from tensorgraph.importers.torch_compat import import_transformers

        transformers = import_transformers()
        auto_model = transformers.AutoModelForCausalLM
    except ImportError as err:  # transformers imports its models lazily, on attribute access
        detail = str(err).splitlines()[0]
        raise UsageError(
            f"{name} needs torch, transformers and tensorgraph.importers.generation "
            f"({detail}); use MODEL llama"
        ) from err
    torch.manual_seed(args.seed)
    config = _hf_config(transformers, args)
    model = auto_model.from_config(config).eval()
    if args.dtype != "float32":  # torch's own half-precision model, imported as it is
        model = model.to(getattr(torch, args.dtype))
    entries = from_torch_generation(
        model, max_seq=args.max_seq, prompt_buckets=buckets, prefill=args.prefill
    )
    if args.kv_bits is not None:  # the imported float cache held quantized (any family)
        from tensorgraph.passes.quantize_states import quantize_graph_states, quantize_states

        try:
            first = quantize_graph_states(
                next(iter(entries.values())), args.kv_bits, args.kv_group_size
            )
            if not first.stats["quantized"]:
                why = "; ".join(f"{k}: {v}" for k, v in first.stats["kept"].items())
                raise UsageError(f"--kv-bits: no cache of {name} can be quantized ({why})")
            entries = quantize_states(entries, args.kv_bits, args.kv_group_size)
        except TensorGraphError as err:
            raise UsageError(str(err)) from err
    if _converted(args) or args.kv_bits is not None:  # the reference interpreter is the
        # oracle then (cmd_generate); --dtype already made torch's own model, so only
        # --quantize is left to apply
        quantized = _precision(args.__class__(**{**vars(args), "dtype": "float32"}), entries)
        return _GenerationModel(quantized, config.vocab_size, None, "")

    def expected(prompt: np.ndarray, tokens: int) -> np.ndarray:
        ids = torch.tensor(prompt[None].astype(np.int64))
        with torch.no_grad():  # no EOS stop: exactly `tokens` new ids, as ours
            out = model.generate(
                ids,
                max_new_tokens=tokens,
                min_new_tokens=tokens,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
            )
        return out[:, prompt.shape[0] :].numpy().astype(np.int32)

    return _GenerationModel(entries, config.vocab_size, expected, "transformers generate")


def _converted(args: argparse.Namespace) -> bool:
    return args.dtype != "float32" or args.quantize is not None


def _precision_name(args: argparse.Namespace) -> str:
    parts = [args.dtype]
    if args.quantize is not None:
        parts.append(f"{args.quantize}-bit {args.quant_mode}")
    if getattr(args, "kv_bits", None) is not None:
        parts.append(f"{args.kv_bits}-bit KV cache")
    return " ".join(parts)


def cmd_generate(args: argparse.Namespace) -> int:
    """Generation with a multi-entry program (prefill buckets + decode sharing weights,
    KV-cache state and one arena), checked token for token against the plain NumPy
    reference loop (llama) or transformers' own greedy generate (hf-llama); with
    --dtype or --quantize, against the reference interpreter running the same converted
    program (a float32 oracle cannot give a reduced-precision model's tokens); with
    --temperature > 0, against the same sampler and seed on the reference interpreter.
    Lengths and sampling parameters are checked before anything is compiled; --stream
    prints each token as it is made."""
    from tensorgraph.cli_seq2seq import cmd_generate_seq2seq, is_seq2seq
    from tensorgraph.models.generation import choose_bucket, generate
    from tensorgraph.models.sampling import Sampler
    from tensorgraph.planner.report import human

    if is_seq2seq(args.model):  # an encoder-decoder family: encode + decode entries
        if args.prefill != "buckets":
            raise UsageError(f"--prefill {args.prefill}: {args.model} is encoder-decoder")
        return cmd_generate_seq2seq(args)
    fitting = tuple(b for b in args.buckets if b <= args.max_seq)
    if not fitting:
        raise UsageError(f"no bucket of {list(args.buckets)} fits --max-seq {args.max_seq}")
    if args.prefill == "symbolic":  # one entry at the prompt's length, 1..max_seq: no padding
        bucket = choose_bucket((args.prompt_len,), args.max_seq, args.prompt_len, args.tokens)
    else:
        bucket = choose_bucket(
            fitting, args.max_seq, args.prompt_len, args.tokens
        )  # before compiling
    _group_size(args)
    sampler = Sampler(args.temperature, args.top_k, args.top_p, args.min_p, args.sampling_seed)
    began = time.perf_counter()
    model = (_zoo_llama if args.model == "llama" else _hf_model)(args, fitting)
    program = compile(model.entries)
    named = _converted(args) or args.kv_bits is not None
    print(
        f"{args.model}{f' ({_precision_name(args)})' if named else ''}: entries "
        f"{', '.join(model.entries)} "
        f"(max_seq {args.max_seq}) compiled in {time.perf_counter() - began:.2f} s"
    )
    prompt = np.random.default_rng(args.seed).integers(0, model.vocab, args.prompt_len)
    cache = None if args.prompt_cache is None else _prompt_cache(args, program, prompt)
    options = {"backend": args.backend, "sampler": sampler, "prompt_cache": cache}
    if args.backend == "mlx":  # the first calls trace each entry: not what tok/s measures
        generate(program, prompt, args.tokens, **options)
    start = f"prefill bucket {bucket}" if cache is None else "resumed from the prompt cache"
    if cache is None and args.prefill == "symbolic":
        start = f"prefill at its length {bucket} (symbolic)"
    print(f"prompt: {args.prompt_len} tokens (seed {args.seed}), {start}")
    if not sampler.is_greedy:
        print(
            f"sampling: temperature {sampler.temperature:g}, top-k {sampler.top_k or 'all'}, "
            f"top-p {sampler.top_p:g}, min-p {sampler.min_p:g} (seed {sampler.seed})"
        )
    result = print_tokens(
        args.stream,
        lambda stream: generate(program, prompt, args.tokens, on_token=stream, **options),
    )
    decode_rate = result.decode_tokens_per_second
    decode = "no decode step" if result.decode_steps == 0 else f"{decode_rate:.1f} tokens/s"
    print(
        f"prefill: {result.prefill_tokens_per_second:.1f} tokens/s "
        f"({result.prefill_seconds * 1000:.1f} ms); decode: {decode} "
        f"({result.decode_steps} steps, {result.decode_seconds * 1000:.1f} ms) on {args.backend}"
    )
    print(
        "memory per entry (arena): "
        + ", ".join(f"{name} {human(size)}" for name, size in result.memory.entries.items())
    )
    if "prefill" in program.entries and cache is None:  # a symbolic prefill: its own length's
        arena = program.entries["prefill"].plan.at(prompt=args.prompt_len).arena_size
        print(f"prefill arena at {args.prompt_len} tokens: {human(arena)} (above: at max-seq)")
    print(program.memory().table())
    if model.expected is None or not sampler.is_greedy:  # the reference interpreter runs it
        expected = generate(program, prompt, args.tokens, backend="numpy", sampler=sampler).tokens
        oracle = f"the NumPy reference interpreter ({_precision_name(args)} program)"
        if not sampler.is_greedy:
            oracle = f"the same sampler (seed {sampler.seed}) on {oracle}"
        if args.dtype != "float32" and args.backend == "mlx":
            return _check_rounding(args, program, prompt, result.tokens, expected, oracle)
    else:
        expected, oracle = model.expected(prompt, args.tokens), model.oracle
    if not np.array_equal(result.tokens, expected):
        step = int(np.argmax((result.tokens != expected).any(axis=0)))
        print(
            f"tokens match {oracle}: NO (first difference at new token {step}: "
            f"{result.tokens[:, step].tolist()} vs {expected[:, step].tolist()})"
        )
        return 1
    print(f"tokens match {oracle}: yes")
    return 0


def print_tokens(stream: bool, run: Callable[[Callable | None], object]) -> object:
    """`run(on_token)`'s result (a generation result), its row 0 tokens printed on one
    "tokens:" line: each as it is made when `stream` (on_token prints and flushes it),
    else all at the end (on_token None)."""
    streamed = []

    def on_token(ids: np.ndarray) -> None:
        print(("tokens:" if not streamed else "") + f" {int(ids[0])}", end="", flush=True)
        streamed.append(int(ids[0]))

    result = run(on_token if stream else None)
    if stream:
        print()
    else:
        print("tokens: " + " ".join(str(t) for t in result.tokens[0]))
    return result


def _prompt_cache(args: argparse.Namespace, program: object, prompt: np.ndarray) -> object:
    """--prompt-cache FILE: the prompt cache saved in FILE (LoadError if another program
    made it), or, when FILE does not exist, the prompt's cache, made and saved there."""
    from tensorgraph.models.generation import cache_prompt
    from tensorgraph.models.prompt_cache import load_prompt_cache, save_prompt_cache

    if args.prompt_cache.exists():
        cache = load_prompt_cache(args.prompt_cache, program)
        print(f"prompt cache: resumed from {args.prompt_cache} ({cache.length} tokens)")
        return cache
    cache = cache_prompt(program, prompt, backend=args.backend)
    save_prompt_cache(cache, args.prompt_cache)
    print(f"prompt cache: saved to {args.prompt_cache} ({cache.length} tokens)")
    return cache


def _check_rounding(
    args: argparse.Namespace,
    program: object,
    prompt: np.ndarray,
    tokens: np.ndarray,
    expected: np.ndarray,
    oracle: str,
) -> int:
    """Reduced precision on MLX: its first logits must be within the rounding the
    program's dtype allows of the reference's (to_dtype.rounding_tolerance); greedy
    tokens after that may flip on a near tie, so their agreement is reported, not
    required."""
    from tensorgraph.models.generation import prefill_logits
    from tensorgraph.passes.to_dtype import rounding_tolerance

    ours = prefill_logits(program, prompt, "mlx").astype(np.float64)
    reference = prefill_logits(program, prompt, "numpy").astype(np.float64)
    entry = program.entries[next(n for n in program.entries if n.startswith("prefill"))]
    bound = rounding_tolerance(entry.graph, args.dtype, float(np.abs(reference).max()))
    gap = float(np.abs(ours - reference).max())
    same = int(np.cumprod(tokens[0] == expected[0]).sum())
    print(
        f"first logits vs {oracle}: max difference {gap:.4g} "
        f"(bound {bound:.4g}, {args.dtype} rounding): {'yes' if gap <= bound else 'NO'}"
    )
    print(
        f"tokens equal the reference for the first {same} of {tokens.shape[1]} (greedy "
        f"choices may flip on {args.dtype} near ties)"
    )
    return 0 if gap <= bound else 1


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expects a positive int but got {text!r}")
    return value


def _seed(text: str) -> int:
    """A seed for NumPy's generators: an int >= 0 (negative seeds are refused, not mapped)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expects a non-negative int but got {text!r}")
    return value


def _output_file(text: str) -> Path:
    """A file to write: its folder must exist and it must not be a folder itself (checked
    before any work, so a typo costs no compile)."""
    if not text:
        raise argparse.ArgumentTypeError("expects a file name but got ''")
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a directory, not a file")
    folder = path.parent
    if not folder.exists():
        raise argparse.ArgumentTypeError(f"no such directory {str(folder)!r} (for {text!r})")
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"{str(folder)!r} is not a directory (for {text!r})")
    return path


def _output_dir(text: str) -> Path:
    """A folder to write into: created if missing, so its nearest existing ancestor must
    be a folder (not a file)."""
    path = Path(text)
    existing = next((p for p in (path, *path.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        raise argparse.ArgumentTypeError(f"{str(existing)!r} is a file, not a directory")
    return path


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:  # also refuses NaN
        raise argparse.ArgumentTypeError(f"expects a positive number of seconds but got {text!r}")
    return value


def _precision_options(sub: argparse.ArgumentParser) -> None:
    """--dtype, --quantize, --group-size, --quant-mode: how the weights are stored."""
    from tensorgraph.ir.quantized import MODES

    sub.add_argument(
        "--dtype",
        choices=("float32", "bfloat16", "float16"),
        default="float32",
        help="compute and weight dtype (tg.to_dtype; default float32)",
    )
    sub.add_argument(
        "--quantize",
        type=int,
        choices=(2, 3, 4, 5, 6, 8),
        metavar="BITS",
        help="quantize matmul weights and embedding tables to BITS (tg.quantize; 2-6 or 8; "
        "default: none)",
    )
    sub.add_argument(
        "--group-size",
        type=int,
        choices=(16, 32, 64, 128),
        default=None,
        metavar="G",
        help="values per scale with --quantize (default 64; 32 for mxfp4/mxfp8, 16 nvfp4)",
    )
    sub.add_argument(
        "--quant-mode",
        choices=tuple(MODES),
        default="affine",
        help="quantization mode with --quantize (default affine)",
    )


def _group_size(args: argparse.Namespace) -> int | None:
    """The group size --quantize uses (None without it); UsageError for options that
    do not go together, before anything is built."""
    from tensorgraph.ir.quantized import check_quantization

    if args.quantize is None:
        if args.group_size is not None or args.quant_mode != "affine":
            raise UsageError("--group-size and --quant-mode take effect only with --quantize BITS")
        return None
    group = args.group_size or {"nvfp4": 16, "mxfp4": 32, "mxfp8": 32}.get(args.quant_mode, 64)
    try:
        check_quantization(args.quant_mode, args.quantize, group)
    except TensorGraphError as err:
        raise UsageError(str(err)) from err
    return group


def _precision(args: argparse.Namespace, graph: object, notes: list | None = None) -> object:
    """`graph` (or a mapping of entries) in --dtype, quantized as --quantize asks, with
    a line per weight that stayed float (and why) appended to `notes`; UsageError for a
    bad combination, before any compile."""
    from tensorgraph import quantize, to_dtype
    from tensorgraph.passes.quantize import quantize_weights

    group = _group_size(args)
    graph = to_dtype(graph, args.dtype)
    if args.quantize is None:
        return graph
    if notes is None or not hasattr(graph, "nodes"):
        return quantize(graph, bits=args.quantize, group_size=group, mode=args.quant_mode)
    result = quantize_weights(graph, bits=args.quantize, group_size=group, mode=args.quant_mode)
    notes += [f"kept float: {name} ({why})" for name, why in result.stats["kept"].items()]
    return result.graph


def _typed_inputs(graph: object, inputs: dict) -> dict:
    """`inputs` rounded to the dtypes `graph` declares (after --dtype): what a user of a
    reduced-precision model feeds."""
    declared = {n.name: n.dtype.to_numpy() for n in graph.inputs}
    return {
        k: np.asarray(v).astype(declared.get(k, np.asarray(v).dtype)) for k, v in inputs.items()
    }


def parser() -> argparse.ArgumentParser:
    """The argument parser (subcommands carry their handler as `run`)."""
    from tensorgraph import __version__
    from tensorgraph.planner.assign import ALGORITHMS
    from tensorgraph.planner.schedule import STRATEGIES

    top = _Parser(prog="tensorgraph", description="A memory-planning tensor-graph compiler.")
    top.add_argument(
        "--version",
        action="version",
        version=f"tensorgraph {__version__}",
        help="print the version and exit",
    )
    commands = top.add_subparsers(
        dest="command", required=True, parser_class=_Parser, metavar="COMMAND"
    )
    commands.add_parser(
        "models", help="list the model zoo", description="List the zoo models and their configs."
    ).set_defaults(run=cmd_models)

    def model_options(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("model", help="a zoo model (see `tensorgraph models`)")
        sub.add_argument(
            "--config",
            nargs="+",
            action="extend",
            default=[],
            metavar="K=V",
            help="override config fields, e.g. batch=8 dtype=float16 (default: the "
            "model's defaults, listed by `tensorgraph models`)",
        )
        sub.add_argument(
            "--algorithm",
            choices=sorted(ALGORITHMS),
            default="best",
            help="offset algorithm of the memory planner",
        )
        sub.add_argument(
            "--schedule", choices=STRATEGIES, default="best", help="node order strategy"
        )
        sub.add_argument(
            "--no",
            action="append",
            metavar="PASS",
            help=f"switch a pass off, repeatable (also --no-dce, --no-cse, --no-view-alias, "
            f"...; default: all of {', '.join(DEFAULT_PASSES)} on)",
        )

    compile_cmd = commands.add_parser(
        "compile",
        help="compile a zoo model, print the plan",
        description="Compile a zoo model and print its passes and memory plan.",
    )
    model_options(compile_cmd)
    _precision_options(compile_cmd)
    compile_cmd.add_argument(
        "--alignment",
        type=_power_of_two,
        default=64,
        metavar="BYTES",
        help="buffer offset alignment, a power of two",
    )
    compile_cmd.add_argument("--report", action="store_true", help="print the full report")
    compile_cmd.add_argument(
        "--plot",
        type=_output_file,
        metavar="FILE",
        help="write the memory timeline as a PNG to FILE, in an existing folder (default: none)",
    )
    compile_cmd.add_argument(
        "--plot-state",
        action="store_true",
        help="draw the state region and the constant segment above the arena in --plot",
    )
    compile_cmd.add_argument(
        "--json",
        type=_output_file,
        metavar="FILE",
        help="write the plan as JSON to FILE, in an existing folder (default: none)",
    )
    compile_cmd.set_defaults(run=cmd_compile)

    run_cmd = commands.add_parser(
        "run",
        help="run a zoo model and check it",
        description="Compile and run a zoo model, checked against the reference interpreter.",
    )
    model_options(run_cmd)
    _precision_options(run_cmd)
    run_cmd.add_argument("--backend", choices=BACKENDS, default="mlx", help="executor")
    run_cmd.add_argument(
        "--seed", type=_seed, default=0, help="seed of the example inputs, an int >= 0"
    )
    run_cmd.set_defaults(run=cmd_run)

    csv_cmd = commands.add_parser("plan-csv", help="plan a MiniMalloc CSV of buffers")
    csv_cmd.add_argument("file")
    csv_cmd.add_argument("--algorithm", choices=sorted(ALGORITHMS), default="best")
    csv_cmd.add_argument(
        "--alignment", type=_power_of_two, default=1, metavar="BYTES", help="a power of two"
    )
    csv_cmd.add_argument(
        "--budget",
        type=_work_units,
        default=None,
        metavar="UNITS",
        help="work units for best or the exact search (about a microsecond each; the "
        "default grows with the buffer count); the same budget gives the same plan",
    )
    csv_cmd.add_argument(
        "--time-limit",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="wall-clock cap (a plan it cuts short may differ between runs)",
    )
    csv_cmd.add_argument(
        "--capacity",
        type=_capacity_bytes,
        default=None,
        metavar="BYTES",
        help="decide by exact search whether the buffers fit, instead of --algorithm "
        "(exit 1 when they do not or the budget runs out first)",
    )
    csv_cmd.add_argument(
        "--out",
        type=_output_file,
        metavar="FILE",
        help="write id,lower,upper,size,offset to FILE, in an existing folder",
    )
    csv_cmd.set_defaults(run=cmd_plan_csv)

    gen = commands.add_parser(
        "generate",
        help="greedy generation with a KV cache, checked against NumPy",
        description="Compile prefill buckets and a decode step into one program sharing "
        "weights, KV-cache state and one arena; generate (greedily, or sampling with "
        "--temperature and the filters); check the token ids against a reference: the "
        "NumPy loop (llama), transformers' generate (hf-llama, hf:<model_type>) or the "
        "reference interpreter running the same converted or sampled program.",
    )
    gen.add_argument(
        "model",
        type=_generate_model,
        metavar="MODEL",
        help="llama (the zoo Llama, default config), hf-llama (transformers LlamaForCausalLM) "
        "or hf:<model_type> (any transformers causal LM family, e.g. hf:qwen3, from a small "
        "config with random weights)",
    )
    gen.add_argument(
        "--prompt-len",
        type=_positive_int,
        default=16,
        metavar="N",
        help="prompt length in tokens (random ids from --seed)",
    )
    gen.add_argument(
        "--tokens", type=_positive_int, default=16, metavar="M", help="new tokens to generate"
    )
    gen.add_argument("--backend", choices=BACKENDS, default="mlx", help="executor")
    gen.add_argument(
        "--buckets",
        type=_buckets,
        default=PREFILL_BUCKETS,
        metavar="L,L,...",
        help="prefill prompt-length buckets (default: 32,128,512); with --prefill symbolic, "
        "the decode windows",
    )
    gen.add_argument(
        "--prefill",
        choices=("buckets", "symbolic"),
        default="buckets",
        help="prefill the prompt padded to a bucket, or at its real length through one "
        "symbolic entry (tg.Dim 'prompt' in [1, max-seq]); default: buckets",
    )
    gen.add_argument(
        "--max-seq",
        type=_positive_int,
        default=512,
        metavar="S",
        help="KV-cache length: prompt + new tokens must fit",
    )
    gen.add_argument(
        "--seed", type=_seed, default=0, help="seed of weights and prompt, an int >= 0"
    )
    _precision_options(gen)
    gen.add_argument(
        "--kv-bits",
        type=int,
        choices=(2, 3, 4, 5, 6, 8),
        default=None,
        metavar="BITS",
        help="keep the KV cache quantized to BITS per value, as mlx-lm's QuantizedKVCache "
        "(the zoo llama attends through quantized_matmul; imported models dequantize the "
        "cache they read; default: none, a float cache)",
    )
    gen.add_argument(
        "--kv-group-size",
        type=int,
        choices=(32, 64, 128),
        default=64,
        metavar="G",
        help="values per scale in the quantized KV cache",
    )
    gen.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        metavar="T",
        help="sample from softmax(logits / T) after the filters below; 0 is greedy",
    )
    gen.add_argument(
        "--top-k",
        type=int,
        default=None,
        metavar="K",
        help="sample among the K most likely (default: all)",
    )
    gen.add_argument(
        "--top-p",
        type=float,
        default=1.0,
        metavar="P",
        help="sample among the fewest most likely tokens whose probabilities sum to >= P",
    )
    gen.add_argument(
        "--min-p",
        type=float,
        default=0.0,
        metavar="P",
        help="sample among tokens of probability >= P times the most likely one's",
    )
    gen.add_argument(
        "--sampling-seed", type=int, default=0, metavar="S", help="seed of the random draws"
    )
    gen.add_argument("--stream", action="store_true", help="print each token as it is made")
    gen.add_argument(
        "--prompt-cache",
        type=_output_file,
        default=None,
        metavar="FILE",
        help="resume from the prompt's state saved in FILE, or save it there first when FILE "
        "does not exist (default: none)",
    )
    gen.set_defaults(run=cmd_generate)

    demo = commands.add_parser(
        "demo",
        help="compile, run, check and plot the llama model",
        description="Compile, run, check and plot the llama model, step by step.",
    )
    demo.add_argument(
        "--out",
        type=_output_dir,
        default=".",
        metavar="DIR",
        help="folder for the timeline plot, created if missing (default: the current folder)",
    )
    demo.set_defaults(run=cmd_demo)

    from tensorgraph.cli_train import add_train_command

    add_train_command(commands)
    return top


def _normalise(argv: list[str]) -> list[str]:
    """`--no-cse`, `--no_cse`, `--no-view-alias` become `--no cse` / `--no view-alias`."""
    result = []
    for arg in argv:
        if arg.startswith(("--no-", "--no_")):
            result += ["--no", arg[len("--no-") :]]
        else:
            result.append(arg)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command in `argv` (default: sys.argv[1:]); returns the exit code."""
    argv = _normalise(list(sys.argv[1:] if argv is None else argv))
    try:
        args = parser().parse_args(argv)
        return args.run(args)
    except SystemExit as done:  # --help and --version
        return done.code if isinstance(done.code, int) else 0
    except UsageError as err:
        print(f"tensorgraph: error: {err}", file=sys.stderr)
        return 2
    except TensorGraphError as err:
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(f"tensorgraph: {type(err).__name__}: {first}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `tensorgraph models | head`: stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as err:
        where = f": {err.filename}" if err.filename else ""
        print(f"tensorgraph: error: {err.strerror or err}{where}", file=sys.stderr)
        return 2
    except MemoryError as err:  # sizes are checked, but no check knows this machine's memory
        detail = str(err).splitlines()[0] if str(err) else "out of memory"
        print(f"tensorgraph: error: {detail} (is the --config too large?)", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tensorgraph: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
