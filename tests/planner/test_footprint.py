"""The footprint (planner/footprint.py): every part of a program's memory, the constant
segment by kind, checked against the bytes of the graph's own values."""

from __future__ import annotations

import numpy as np

import tensorgraph as tg
from tensorgraph.models import build_model
from tensorgraph.models.generation import llama_generation


def test_float32_weights_are_one_kind_and_the_parts_add_up() -> None:
    graph = build_model("llama").graph
    prog = tg.compile(graph)
    memory = prog.memory()
    weights = sum(v.nbytes for v in prog.graph.param_values.values())
    assert dict(memory.constants) == {"float32": weights}
    assert memory.padding == memory.constant_size - weights >= 0
    inputs = sum(n.nbytes for n in graph.inputs)
    outputs = sum(graph.node(o).nbytes for o in graph.outputs)
    assert memory.io_size == inputs + outputs
    assert memory.total == memory.constant_size + memory.arena_size + memory.io_size
    assert memory.state_size == 0 and memory.arena_size == prog.plan.arena_size
    assert "memory footprint:" in prog.report()


def test_quantized_weights_are_counted_by_their_quantization() -> None:
    graph = tg.to_dtype(build_model("llama").graph, tg.bfloat16, keep_float32=False)
    prog = tg.compile(tg.quantize(graph, bits=4, group_size=32))
    kinds = dict(prog.memory().constants)
    values = prog.graph.param_values
    bases = [n.removesuffix(".scales") for n in values if n.endswith(".scales")]
    names = [f"{b}{part}" for b in bases for part in ("", ".scales", ".biases")]
    assert bases and kinds["4-bit affine, group 32"] == sum(values[n].nbytes for n in names)
    assert kinds["bfloat16"] == sum(v.nbytes for n, v in values.items() if n not in names)
    assert set(kinds) == {"4-bit affine, group 32", "bfloat16"}
    assert "4-bit affine, group 32" in prog.memory().table()


def test_a_generation_program_holds_its_caches_and_its_weights_once() -> None:
    entries = llama_generation(max_seq=32, buckets=(8,), windows=())
    multi = tg.compile(entries)
    memory = multi.memory()
    caches = sum(int(np.prod(s.shape)) * 4 for s in next(iter(entries.values())).states)
    assert memory.state_size >= caches > 0
    weights = sum(v.nbytes for v in entries["decode"].param_values.values())
    assert sum(size for _, size in memory.constants) <= weights + 4 * 2**16
    assert memory.arena_size == multi.arena_size
    assert memory.total == multi.total_size + memory.io_size
