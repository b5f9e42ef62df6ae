"""torch.compile of code that differentiates through the fused functional ops.

A MAML outer step written with ``torch.func`` (an inner loop of fused Adam updates on per-task
gradients, the meta-gradient by an outer ``grad``) traces into one graph without breaks, keeps the
fused op and its fused backward in that graph, and computes what the eager step computes.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch._dynamo.backends.common import aot_autograd

from fused_optim import functional as FF

NAMES = ("w1", "b1", "w2", "b2")
TASKS, K, STEPS = 2, 4, 2


def _problem():
    gen = torch.Generator().manual_seed(0)
    params = {"w1": 0.5 * torch.randn(1, 8, generator=gen), "b1": torch.zeros(8),
              "w2": 0.3 * torch.randn(8, 1, generator=gen), "b2": torch.zeros(1)}
    x = 4 * torch.rand(TASKS, 2 * K, 1, generator=gen) - 2
    return params, x, torch.sin(x)


def _net(p, x):
    return torch.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]


def _task_loss(p, x, y):
    m = [torch.zeros_like(p[n]) for n in NAMES]
    v = [torch.zeros_like(p[n]) for n in NAMES]
    for step in range(1, STEPS + 1):
        g = torch.func.grad(lambda q: F.mse_loss(_net(q, x[:K]), y[:K]))(p)
        new = FF.adam_update([p[n] for n in NAMES], [g[n] for n in NAMES], m, v, step, lr=0.05)
        p, m, v = dict(zip(NAMES, new.params)), new.exp_avgs, new.exp_avg_sqs
    return F.mse_loss(_net(p, x[K:]), y[K:])


def maml_step(params, x, y):
    """Mean meta-gradient and query loss over the tasks."""
    results = [torch.func.grad_and_value(_task_loss)(params, x[t], y[t]) for t in range(TASKS)]
    grads = {n: sum(g[n] for g, _ in results) / TASKS for n in NAMES}
    return grads, sum(loss for _, loss in results) / TASKS


def test_compiled_maml_step_is_one_graph_equal_to_eager_and_keeps_the_fused_ops():
    params, x, y = _problem()
    graphs = []

    def keep(gm, _example_inputs):  # the graph as AOTAutograd hands it to a compiler, run as is
        graphs.append(gm)
        return gm

    backend = aot_autograd(fw_compiler=keep)

    # fullgraph: a graph break raises; and the one graph is the whole step
    torch._dynamo.reset()
    compiled_grads, compiled_loss = torch.compile(maml_step, backend=backend, fullgraph=True)(params, x, y)
    torch._dynamo.reset()
    assert len(graphs) == 1
    eager_grads, eager_loss = maml_step(params, x, y)
    torch.testing.assert_close(compiled_loss, eager_loss, rtol=1e-5, atol=1e-6)
    for n in NAMES:
        torch.testing.assert_close(compiled_grads[n], eager_grads[n], rtol=1e-4, atol=1e-6)
    assert eager_loss > 1e-3 and all(eager_grads[n].abs().max() > 1e-4 for n in NAMES)

    code = graphs[0].code
    # The inner loop's updates and the meta-gradient's pass back through them stay fused.
    assert "fused_optim.adam_update" in code and "fused_optim.adam_update_backward" in code


def test_compiled_update_backward_matches_eager():
    gen = torch.Generator().manual_seed(1)
    p0, g0 = torch.randn(5, generator=gen), torch.randn(5, generator=gen)
    m0, v0 = torch.randn(5, generator=gen), torch.rand(5, generator=gen)

    def meta_loss(p, g, m, v):
        new = FF.adam_update([p], [g], [m], [v], 3, lr=0.1, weight_decay=0.1, amsgrad=True, max_exp_avg_sqs=[v])
        return (new.params[0] ** 2).sum() + new.exp_avgs[0].sum()

    def grads(fn):
        leaves = [t.clone().requires_grad_() for t in (p0, g0, m0, v0)]
        fn(*leaves).backward()
        return [t.grad for t in leaves]

    torch._dynamo.reset()
    for a, b in zip(grads(torch.compile(meta_loss, backend="aot_eager", fullgraph=True)), grads(meta_loss)):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


def _counting_backend():
    """An eager backend that counts the graphs torch.compile hands it and the fused ops in them."""
    graphs = []

    def backend(gm, _example_inputs):
        graphs.append(gm)
        return gm.forward

    return graphs, backend


def test_step_count_is_symbolic_one_graph_serves_every_step():
    # The ops take `SymInt step`: a compiled update called with steps 1..10 compiles at most twice
    # (the first call specializes, the second makes the step dynamic), keeps the fused op in the
    # graph and gives the eager results; with an `int` schema it recompiled for every step.
    torch._dynamo.reset()
    graphs, backend = _counting_backend()

    def update(params, grads, m, v, step):
        new = FF.adam_update(params, grads, m, v, step, lr=0.1, weight_decay=0.01)
        return new.params, new.exp_avgs, new.exp_avg_sqs

    compiled = torch.compile(update, backend=backend, fullgraph=True)
    gen = torch.Generator().manual_seed(1)
    params = [torch.randn(5, generator=gen), torch.randn(2, 3, generator=gen)]
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    eager_state = (params, m, v)
    state = (params, m, v)
    for step in range(1, 11):
        grads = [torch.randn(p.shape, generator=gen) for p in params]
        eager_state = update(*eager_state[:1], grads, *eager_state[1:], step)
        state = compiled(*state[:1], grads, *state[1:], step)
        for got, want in zip(state, eager_state):
            # the backend runs the captured graph eagerly: the same fused op, bit for bit
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert 1 <= len(graphs) <= 2
    for gm in graphs:
        assert any(n.target is torch.ops.fused_optim.adam_update.default for n in gm.graph.nodes)


def test_differentiable_inputs_fresh_each_step_compile_once():
    # The autograd node's inputs are fresh tensors that require grad on every call (a MAML inner
    # loop's new parameters): the compiled update must not guard on their identity (it used to
    # compile a new graph for every step), and its gradients are the eager ones. One tensor given
    # in two argument slots (the moments, here) still traces.
    torch._dynamo.reset()
    graphs, backend = _counting_backend()

    def loss(params, grads, m, step):
        new = FF.adam_update(params, grads, m, m, step, lr=0.1)
        return sum((p * p).sum() for p in new.params)

    compiled = torch.compile(loss, backend=backend, fullgraph=True)
    gen = torch.Generator().manual_seed(2)
    for step in range(1, 7):
        params = [torch.randn(3, 2, generator=gen, dtype=torch.float64).requires_grad_(),
                  torch.randn(4, generator=gen, dtype=torch.float64).requires_grad_()]
        grads = [torch.randn(p.shape, generator=gen, dtype=torch.float64).requires_grad_() for p in params]
        m = [torch.rand(p.shape, generator=gen, dtype=torch.float64).requires_grad_() for p in params]
        leaves = [*params, *grads, *m]
        want = torch.autograd.grad(loss(params, grads, m, step), leaves)
        got = torch.autograd.grad(compiled(params, grads, m, step), leaves)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert 1 <= len(graphs) <= 2


def test_symbolic_step_is_still_checked():
    torch._dynamo.reset()
    compiled = torch.compile(lambda p, g, step: FF.adam_update(p, g, [torch.zeros(2)], [torch.zeros(2)], step).params,
                             backend="eager", dynamic=True, fullgraph=True)
    assert compiled([torch.ones(2)], [torch.ones(2)], 3)[0].shape == (2,)
    with pytest.raises(ValueError, match="step must be >= 1"):
        compiled([torch.ones(2)], [torch.ones(2)], 0)
