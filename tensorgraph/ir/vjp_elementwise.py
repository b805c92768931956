"""Vector-Jacobian rules of the elementwise ops (unary, binary, `where`, `cast`, and a
fused `elementwise` chain, decomposed into its steps' rules), registered on the ops in
`OPS` on import.

Conventions, where a derivative is not unique, follow MLX (whose `value_and_grad` the
API mirrors): `maximum`/`minimum` send the whole cotangent of a tie to their second
operand; `abs` has derivative sign(x) (0 at 0); `relu` has 0 at 0 (x > 0, as torch and
JAX); the piecewise-constant ops (floor, ceil, round, trunc, sign, floor_divide) have
zero gradients, as in JAX and MLX. `pow`'s exponent gradient is 0 where the base is 0
(JAX's rule: out * log(base) would be 0 * -inf there). Broadcast operands receive their
cotangent summed back to their shape (`unbroadcast`). Integer and bool operands never
receive one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from tensorgraph.ir import functions as fn
from tensorgraph.ir import math_functions as mfn
from tensorgraph.ir.elementwise_fused import step_nodes
from tensorgraph.ir.node import Node
from tensorgraph.ir.ops import OPS, Vjp, register_vjp
from tensorgraph.ir.tensor import Tensor, emit
from tensorgraph.ir.vjp_support import as_operand, cast_to, no_gradient, zeros


def _unary(derivative: Callable[[Node, Tensor, Tensor, Tensor], Tensor]) -> Vjp:
    """A unary rule from `derivative(node, x, out, g)`, the cotangent of x."""

    def rule(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list[Tensor]:
        return [derivative(node, inputs[0], out, g)]

    return rule


def _mask(condition: Tensor, like: Tensor) -> Tensor:
    return fn.astype(condition, like.dtype)


def _gelu(node: Node, x: Tensor, out: Tensor, g: Tensor) -> Tensor:
    if node.attr("approximate") == "tanh":
        # d/dx 0.5 x (1 + t), t = tanh(c (x + k x^3)): 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3k x^2)
        c, k = math.sqrt(2 / math.pi), 0.044715
        t = fn.tanh(c * (x + k * x * x * x))
        slope = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3 * k * x * x)
        return g * slope
    # Phi(x) + x phi(x): the normal CDF plus x times its density
    cdf = 0.5 * (1.0 + mfn.erf(x * (1 / math.sqrt(2))))
    density = fn.exp(-0.5 * x * x) * (1 / math.sqrt(2 * math.pi))
    return g * (cdf + x * density)


def _silu(node: Node, x: Tensor, out: Tensor, g: Tensor) -> Tensor:
    s = fn.sigmoid(x)
    return g * (s + x * s * (1.0 - s))


UNARY: dict[str, Callable[[Node, Tensor, Tensor, Tensor], Tensor]] = {
    "neg": lambda node, x, out, g: -g,
    "abs": lambda node, x, out, g: g * mfn.sign(x),
    "square": lambda node, x, out, g: g * (2.0 * x),
    # relu(x) > 0 exactly where x > 0: the mask from the output, as torch saves it, so
    # the backward never reads the input (an in-place relu's input is gone, and a
    # recomputed input would be copied once more for the mask alone).
    "relu": lambda node, x, out, g: g * _mask(out > 0, g),
    "exp": lambda node, x, out, g: g * out,
    "log": lambda node, x, out, g: g / x,
    "sqrt": lambda node, x, out, g: g * 0.5 / out,
    "rsqrt": lambda node, x, out, g: g * -0.5 * out / x,
    "reciprocal": lambda node, x, out, g: -g * out * out,
    "sin": lambda node, x, out, g: g * fn.cos(x),
    "cos": lambda node, x, out, g: -g * fn.sin(x),
    "tanh": lambda node, x, out, g: g * (1.0 - out * out),
    "sigmoid": lambda node, x, out, g: g * out * (1.0 - out),
    "silu": _silu,
    "gelu": _gelu,
    "erf": lambda node, x, out, g: g * (2 / math.sqrt(math.pi)) * fn.exp(-(x * x)),
    "log1p": lambda node, x, out, g: g / (1.0 + x),
    "expm1": lambda node, x, out, g: g * (out + 1.0),
    "tan": lambda node, x, out, g: g * (1.0 + out * out),
    "atan": lambda node, x, out, g: g / (1.0 + x * x),
}


def _binary(
    derivative: Callable[[Tensor, Tensor, Tensor, Tensor], tuple[Tensor, Tensor]],
) -> Vjp:
    """A binary rule from `derivative(a, b, out, g)`, the cotangents at the output's
    (broadcast) shape; each is summed back to its operand (`as_operand`). Operands are
    cast to the output's dtype first, as the kernels compute."""

    def rule(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
        a, b = (cast_to(x, out.dtype) for x in inputs)
        ga, gb = derivative(a, b, out, g)
        return [
            as_operand(c, x) if x.dtype.is_float else None
            for c, x in zip((ga, gb), inputs, strict=True)
        ]

    return rule


def _pow(a: Tensor, b: Tensor, out: Tensor, g: Tensor) -> tuple[Tensor, Tensor]:
    ga = g * b * fn.power(a, b - 1.0)
    is_zero = fn.equal(a, 0.0)
    safe_log = fn.log(fn.where(is_zero, 1.0, a))
    gb = g * fn.where(is_zero, 0.0, out * safe_log)
    return ga, gb


def _atan2(a: Tensor, b: Tensor, out: Tensor, g: Tensor) -> tuple[Tensor, Tensor]:
    scale = g / (a * a + b * b)
    return scale * b, -scale * a


def _remainder(a: Tensor, b: Tensor, out: Tensor, g: Tensor) -> tuple[Tensor, Tensor]:
    return g, -g * mfn.floor(a / b)


def _fmod(a: Tensor, b: Tensor, out: Tensor, g: Tensor) -> tuple[Tensor, Tensor]:
    return g, -g * mfn.trunc(a / b)


BINARY: dict[str, Callable[[Tensor, Tensor, Tensor, Tensor], tuple[Tensor, Tensor]]] = {
    "add": lambda a, b, out, g: (g, g),
    "sub": lambda a, b, out, g: (g, -g),
    "mul": lambda a, b, out, g: (g * b, g * a),
    "div": lambda a, b, out, g: (g / b, -g * out / b),
    "pow": _pow,
    # MLX: a tie sends the whole cotangent to the second operand
    "maximum": lambda a, b, out, g: (g * _mask(a > b, g), g * _mask(a <= b, g)),
    "minimum": lambda a, b, out, g: (g * _mask(a < b, g), g * _mask(a >= b, g)),
    "atan2": _atan2,
    "remainder": _remainder,
    "fmod": _fmod,
}


def _where(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    condition, a, b = inputs
    nothing = zeros(g)
    return [
        None,
        as_operand(fn.where(condition, g, nothing), a) if a.dtype.is_float else None,
        as_operand(fn.where(condition, nothing, g), b) if b.dtype.is_float else None,
    ]


def _cast(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    """Between floats the cotangent is cast back; from an integer or bool, none flows."""
    (x,) = inputs
    return [fn.astype(g, x.dtype) if x.dtype.is_float else None]


def _elementwise(node: Node, inputs: Sequence[Tensor], out: Tensor, g: Tensor) -> list:
    """A fused chain (ir/elementwise_fused.py), decomposed: its steps before the last
    are emitted again from `inputs` (the backward reads them), then each step's own
    rule runs from the last to the first, cotangents of a value read twice summed."""
    steps = step_nodes(node, [(x.shape, x.dtype) for x in inputs])
    values = list(inputs)
    for step in steps[:-1]:
        values.append(emit(step.op, [values[r] for r in step.inputs]))
    values.append(out)
    cotangents: dict[int, Tensor] = {len(values) - 1: g}
    for k in reversed(range(len(steps))):
        c = cotangents.pop(len(inputs) + k, None)
        if c is None:
            continue
        step, operands = steps[k], [values[r] for r in steps[k].inputs]
        flows = OPS[step.op].vjp(step, operands, values[len(inputs) + k], c)
        for r, flow in zip(step.inputs, flows, strict=True):
            if flow is not None:
                cotangents[r] = cotangents[r] + flow if r in cotangents else flow
    return [cotangents.get(k) for k in range(len(inputs))]


for _name, _derivative in UNARY.items():
    register_vjp(_name, _unary(_derivative))
for _name, _derivative2 in BINARY.items():
    register_vjp(_name, _binary(_derivative2))
for _name in ("floor", "ceil", "round", "trunc", "sign", "floor_divide"):
    register_vjp(_name, no_gradient)
register_vjp("where", _where)
register_vjp("cast", _cast)
register_vjp("elementwise", _elementwise)
