"""torch.compile and diffopt: what traces into one graph today, and the known break.

diffopt's fused Adam direction (``diffopt.accelerated_op.adam_direction``, what
``use_accelerated_op=True`` runs) traces inside a compiled ``torch.func`` inner loop without a
break and computes what eager computes. diffopt's transforms themselves do not compile yet:
optree-core's functions are nanobind functions, which Dynamo cannot trace (a graph break at each),
and at such a break Dynamo calls the nanobind method ``PyTreeSpec.unflatten`` without its ``self``
(a TypeError); ``benchmarks/maml/bench_compile.py --blockers-only`` prints both reproductions. The
strict xfail below turns into a failure, asking for its marker to go, once they trace.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import diffopt
from diffopt.accelerated_op import adam_direction

pytestmark = pytest.mark.skipif(not diffopt.accelerated_op_available("cpu"), reason="fused-optim missing")


def _inner_loop(w, x, y):
    """Three Adam steps on a least-squares problem with the fused direction, then a query loss."""
    m, v = torch.zeros_like(w), torch.zeros_like(w)
    for step in range(1, 4):
        g = torch.func.grad(lambda w: F.mse_loss(x[:6] @ w, y[:6]))(w)
        (d,), (m,), (v,) = adam_direction([g], [m], [v], step, beta1=0.9, beta2=0.999, eps=1e-8)
        w = w - 0.1 * d
    return F.mse_loss(x[6:] @ w, y[6:])


def _data():
    gen = torch.Generator().manual_seed(0)
    return torch.randn(3, generator=gen), torch.randn(12, 3, generator=gen), torch.randn(12, generator=gen)


def test_fused_inner_loop_meta_gradient_compiles_without_graph_breaks():
    w, x, y = _data()
    meta_grad = torch.func.grad(_inner_loop)
    explanation = torch._dynamo.explain(meta_grad)(w, x, y)
    assert (explanation.graph_count, explanation.graph_break_count) == (1, 0)
    torch._dynamo.reset()
    compiled = torch.compile(meta_grad, backend="aot_eager", fullgraph=True)(w, x, y)
    eager = meta_grad(w, x, y)
    assert eager.abs().max() > 1e-3
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-6)


@pytest.mark.xfail(strict=True, raises=TypeError, reason=(
    "optree-core's pytree functions are nanobind functions Dynamo cannot trace, and at the graph break "
    "Dynamo calls the nanobind method PyTreeSpec.unflatten without its self: TypeError"))
def test_functional_adam_update_compiles():
    opt = diffopt.adam(lr=0.01, use_accelerated_op=True)
    params = {"w": torch.ones(3)}
    state = opt.init(params)

    def step(grads, state):
        updates, state = opt.update(grads, state, inplace=False)
        return diffopt.apply_updates(params, updates, inplace=False)

    grads = {"w": torch.tensor([0.5, -1.0, 2.0])}
    torch._dynamo.reset()
    compiled = torch.compile(step, backend="eager")(grads, state)
    torch.testing.assert_close(compiled, step(grads, state))
    explanation = torch._dynamo.explain(step)(grads, state)
    assert explanation.graph_break_count == 0
