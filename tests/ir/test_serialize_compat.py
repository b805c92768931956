"""Graph files written before an op gained attributes keep loading, with the defaults."""

import json

import numpy as np
import pytest

import tensorgraph as tg


def pool_graph_without(names: tuple[str, ...]) -> str:
    g = tg.Graph("old")
    x = g.input("x", (1, 2, 6, 6))
    g.output(tg.max_pool2d(x, 2, 2), tg.avg_pool2d(x, 3, 1, 1))
    document = json.loads(g.to_json())
    for node in document["nodes"]:
        node["attrs"] = [a for a in node["attrs"] if a[0] not in names]
    return json.dumps(document)


def test_pools_written_before_ceil_mode_and_dilation_load_with_defaults() -> None:
    text = pool_graph_without(("ceil_mode", "dilation", "divisor_override"))
    g = tg.Graph.from_json(text)
    pool = next(n for n in g.nodes if n.op == "max_pool2d")
    assert pool.attr("ceil_mode") is False and pool.attr("dilation") == (1, 1)
    x = np.arange(72, dtype=np.float32).reshape(1, 2, 6, 6)
    # max over each 2x2 window of rows 2i, 2i+1 and columns 2j, 2j+1: the bottom-right
    # element x[2i+1, 2j+1] = 6*(2i+1) + 2j+1 (+36 for channel 1).
    want = np.array([[6 * (2 * i + 1) + 2 * j + 1 for j in range(3)] for i in range(3)])
    got = tg.compile(g).run({"x": x}, backend="numpy")[0]
    assert np.array_equal(got[0, 0], want) and np.array_equal(got[0, 1], want + 36)


def test_an_unknown_attribute_is_still_refused() -> None:
    document = json.loads(pool_graph_without(()))
    document["nodes"][1]["attrs"].append(["inplace", True])
    with pytest.raises(tg.GraphError, match="unknown attribute"):
        tg.Graph.from_json(json.dumps(document))
