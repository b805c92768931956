"""FLOP estimates per op family (planner/flops.py), each derived by hand from the
shapes: a multiply-add is 2 FLOPs."""

from __future__ import annotations

import tensorgraph as tg
from tensorgraph.planner.flops import flops


def cost_of(build) -> int:
    g = tg.Graph("flops")
    out = build(g)
    g.output(out)
    return flops(g, g.node(out.id))


def test_matmul_is_two_m_n_k():
    # (3, 5, 7) @ (7, 2): 3 batches of 5x2 outputs, each 7 multiply-adds.
    def build(g):
        return g.input("a", (3, 5, 7)) @ g.input("b", (7, 2))

    assert cost_of(build) == 2 * 3 * 5 * 2 * 7


def test_conv2d_is_two_per_output_per_input_window_element():
    # 2 images, 6 output channels of 8x8; each reads 4/2 input channels x 3x3 (groups 2).
    def build(g):
        x = g.input("x", (2, 4, 8, 8))
        w = g.input("w", (6, 2, 3, 3))
        return tg.conv2d(x, w, padding=1, groups=2)

    assert cost_of(build) == 2 * (2 * 6 * 8 * 8) * (2 * 3 * 3)


def test_elementwise_reduction_and_layout_ops():
    assert cost_of(lambda g: tg.exp(g.input("x", (4, 5)))) == 20
    assert cost_of(lambda g: g.input("x", (4, 5)).sum(axis=1)) == 20
    assert cost_of(lambda g: tg.softmax(g.input("x", (4, 5)))) == 5 * 20
    assert cost_of(lambda g: g.input("x", (4, 5)).reshape(20) + 0.0) == 20
    assert cost_of(lambda g: tg.transpose(g.input("x", (4, 5)))) == 0


def test_attention_is_its_two_matmuls_and_softmax():
    # batch 1, 2 heads, 3 queries, 4 keys, head dim 8: scores 1*2*3*4 = 24.
    def build(g):
        q = g.input("q", (1, 2, 3, 8))
        k = g.input("k", (1, 2, 4, 8))
        v = g.input("v", (1, 2, 4, 8))
        return tg.scaled_dot_product_attention(q, k, v, scale=0.5)

    assert cost_of(build) == 2 * 2 * 24 * 8 + 5 * 24
