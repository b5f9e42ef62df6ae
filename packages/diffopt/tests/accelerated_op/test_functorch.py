"""use_accelerated_op=True under torch.func: the fused Adam op in a functional MAML inner loop,
vmapped over tasks, against a per-task loop and against the pure-PyTorch Adam."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import diffopt

pytestmark = pytest.mark.skipif(not diffopt.accelerated_op_available("cpu"), reason="fused-optim missing")

TASKS, K = 4, 5


def _problem():
    gen = torch.Generator().manual_seed(0)
    kw = dict(dtype=torch.float64, generator=gen)
    params = {"w1": 0.5 * torch.randn(1, 16, **kw), "b1": torch.zeros(16, dtype=torch.float64),
              "w2": 0.3 * torch.randn(16, 1, **kw), "b2": torch.zeros(1, dtype=torch.float64)}
    x = 4 * torch.rand(TASKS, 2 * K, 1, **kw) - 2
    y = (0.5 + torch.rand(TASKS, 1, 1, **kw)) * torch.sin(x + torch.rand(TASKS, 1, 1, **kw))
    return params, x, y


def _net(p, x):
    return torch.tanh(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]


def _maml_loss(use_accelerated_op: bool, params):
    """Query loss after 3 functional Adam steps on the support half, as a function of the meta-params.

    The optimizer state is initialized outside the transforms (diffopt's ``init`` is part 1 of #12).
    """
    opt = diffopt.adam(lr=0.05, use_accelerated_op=use_accelerated_op)
    state0 = opt.init(params)

    def loss(p, x, y):
        state = state0
        for _ in range(3):
            g = torch.func.grad(lambda q: F.mse_loss(_net(q, x[:K]), y[:K]))(p)
            updates, state = opt.update(g, state, params=p, inplace=False)
            p = diffopt.apply_updates(p, updates, inplace=False)
        return F.mse_loss(_net(p, x[K:]), y[K:])

    return loss


def test_vmapped_maml_with_fused_adam_equals_per_task_loop():
    params, x, y = _problem()
    loss = _maml_loss(True, params)
    batched = torch.vmap(torch.func.grad(loss), in_dims=(None, 0, 0))(params, x, y)
    for t in range(TASKS):
        per_task = torch.func.grad(loss)(params, x[t], y[t])
        for name in params:
            torch.testing.assert_close(batched[name][t], per_task[name], rtol=1e-12, atol=1e-14)
    assert all(batched[name].abs().max() > 1e-6 for name in params)  # a real meta-gradient


def test_vmapped_maml_fused_equals_pure_pytorch_adam():
    params, x, y = _problem()
    fused = torch.vmap(torch.func.grad(_maml_loss(True, params)), in_dims=(None, 0, 0))(params, x, y)
    plain = torch.vmap(torch.func.grad(_maml_loss(False, params)), in_dims=(None, 0, 0))(params, x, y)
    for name in params:
        torch.testing.assert_close(fused[name], plain[name], rtol=1e-10, atol=1e-12)


def test_torch_func_meta_gradient_equals_autograd_with_meta_adam():
    """The functional fused path and diffopt.MetaAdam(use_accelerated_op=True) on an nn.Module agree."""
    params, x, y = _problem()
    loss = _maml_loss(True, params)
    want = torch.func.grad(loss)(params, x[0], y[0])

    net = torch.nn.Sequential(torch.nn.Linear(1, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).double()
    with torch.no_grad():
        net[0].weight.copy_(params["w1"].T)
        net[0].bias.copy_(params["b1"])
        net[2].weight.copy_(params["w2"].T)
        net[2].bias.copy_(params["b2"])
    w1, b1, w2, b2 = net.parameters()  # the leaves; MetaAdam replaces the module's tensors
    inner = diffopt.MetaAdam(net, lr=0.05, use_accelerated_op=True)
    for _ in range(3):
        inner.step(F.mse_loss(net(x[0, :K]), y[0, :K]))
    F.mse_loss(net(x[0, K:]), y[0, K:]).backward()
    for leaf, name, transpose in ((w1, "w1", True), (b1, "b1", False), (w2, "w2", True), (b2, "b2", False)):
        torch.testing.assert_close(leaf.grad.T if transpose else leaf.grad, want[name], rtol=1e-10, atol=1e-12)


def test_accelerated_adam_direction_vmaps_and_grads_per_sample():
    from diffopt.accelerated_op import adam_direction

    gen = torch.Generator().manual_seed(1)
    g = torch.randn(6, 4, dtype=torch.float64, generator=gen)
    m = torch.randn(6, 4, dtype=torch.float64, generator=gen)
    v = torch.rand(6, 4, dtype=torch.float64, generator=gen)

    def f(g, m, v):
        d, m2, v2 = adam_direction([g], [m], [v], 4, beta1=0.9, beta2=0.99, eps=1e-3)
        return (d[0] ** 2).sum() + (m2[0] * v2[0]).sum()

    batched = torch.vmap(torch.func.grad(f, argnums=(0, 1, 2)))(g, m, v)
    for i in range(6):
        per_sample = torch.func.grad(f, argnums=(0, 1, 2))(g[i], m[i], v[i])
        for a, b in zip(batched, per_sample):
            torch.testing.assert_close(a[i], b, rtol=1e-12, atol=1e-14)
