"""Lion and Adan, the optimizers torch.optim lacks, on what is theirs alone: the fused classes against
a plain per-tensor transcription of each paper's update, their constructor checks and defaults,
Adan's previous gradient, the functional ops' meta-gradients against the reference's autograd over
several steps, and CUDA against CPU. Their comparisons with their twins (the pure-PyTorch classes in
fused_optim._reference), as for every drop-in class, are in test_optim.py."""


from __future__ import annotations

import math

import pytest
import torch
import twins
from twins import TOL

import fused_optim
from fused_optim import _reference
from fused_optim import functional as F

CONFIGS = twins.as_params(twins.research_configs())

def _lion_paper(p, g, m, lr, beta1, beta2, wd, maximize):
    """Lion's update, one tensor, as the paper's Algorithm writes it."""
    g = -g if maximize else g
    update = torch.sign(beta1 * m + (1 - beta1) * g)
    return p - lr * (update + wd * p), beta2 * m + (1 - beta2) * g


def _adan_paper(p, g, state, t, lr, betas, eps, weight_decay, no_prox, maximize):
    """Adan's update, one tensor, transcribed with the betas as decay rates and the choices of
    fused_optim.Adan (zero difference on the first step, bias corrections, eps outside the root)."""
    b1, b2, b3 = betas
    g = -g if maximize else g
    m, v, n, prev = state
    d = torch.zeros_like(g) if t == 1 else g - prev
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * d
    n = b3 * n + (1 - b3) * (g + b2 * d) ** 2
    eta = lr / (torch.sqrt(n / (1 - b3**t)) + eps)
    step = eta * (m / (1 - b1**t) + b2 * v / (1 - b2**t))
    wd = weight_decay
    p = p * (1 - lr * wd) - step if no_prox else (p - step) / (1 + lr * wd)
    return p, (m, v, n, g)


@pytest.mark.parametrize("name, kwargs", CONFIGS)
def test_matches_the_papers_update(name, kwargs):
    params = twins.params(torch.float64)
    opt = getattr(fused_optim, name)(params, **kwargs)
    mine = [p.detach().clone() for p in params]
    states = [None] * len(params)
    full = dict(dict(lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0) if name == "Lion" else
                dict(lr=1e-3, betas=(0.98, 0.92, 0.99), eps=1e-8, weight_decay=0.0, no_prox=False), maximize=False)
    full.update(kwargs)
    for step in range(1, 9):
        for i, (p, g) in enumerate(zip(params, twins.grads(params, step))):
            p.grad = g
            if name == "Lion":
                m = torch.zeros_like(g) if states[i] is None else states[i]
                mine[i], states[i] = _lion_paper(mine[i], g, m, full["lr"], *full["betas"], full["weight_decay"],
                                                 full["maximize"])
            else:
                state = states[i] or tuple(torch.zeros_like(g) for _ in range(4))
                mine[i], states[i] = _adan_paper(mine[i], g, state, step, **full)
        opt.step()
    for a, b in zip(mine, params):
        torch.testing.assert_close(b.detach(), a, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name, bad, match", [
    ("Lion", dict(lr=-1.0), "Invalid learning rate"),
    ("Lion", dict(betas=(1.0, 0.9)), "beta parameter at index 0"),
    ("Lion", dict(betas=(0.9, 0.99, 0.9)), "betas must be a sequence of 2"),
    ("Lion", dict(weight_decay=-0.1), "Invalid weight_decay"),
    ("Adan", dict(betas=(0.98, 0.92, -0.1)), "beta parameter at index 2"),
    ("Adan", dict(betas=(0.9, 0.99)), "betas must be a sequence of 3"),
    ("Adan", dict(eps=-1.0), "Invalid epsilon"),
    ("Adan", dict(weight_decay=float("nan")), "Invalid weight_decay"),
])
def test_constructor_checks(name, bad, match):
    p = [torch.ones(1, requires_grad=True)]
    for cls in (getattr(_reference, name), getattr(fused_optim, name)):
        with pytest.raises(ValueError, match=match):
            cls(p, **bad)


def test_defaults_are_the_papers():
    p = [torch.ones(1, requires_grad=True)]
    assert fused_optim.Lion(p).defaults == dict(lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0, maximize=False,
                                                capturable=False)
    assert fused_optim.Adan(p).defaults == dict(lr=1e-3, betas=(0.98, 0.92, 0.99), eps=1e-8, weight_decay=0.0,
                                                no_prox=False, maximize=False, capturable=False)
    assert issubclass(fused_optim.Lion, torch.optim.Optimizer) and issubclass(fused_optim.Adan, torch.optim.Optimizer)


def test_adan_first_step_ignores_prev_grad_and_later_steps_read_it():
    # On a parameter's first step the gradient difference is zero whatever prev_grad holds.
    p = torch.ones(3, requires_grad=True)
    opt = fused_optim.Adan([p], lr=0.1)
    p.grad = torch.tensor([1.0, -2.0, 3.0])
    opt.state[p]["step"] = torch.tensor(0.0)
    for key in ("exp_avg", "exp_avg_diff", "exp_avg_sq"):
        opt.state[p][key] = torch.zeros(3)
    opt.state[p]["prev_grad"] = torch.full((3,), 100.0)
    opt.step()
    # exactly: the difference is 0 on a first step (so is its average), and prev_grad a copy
    assert torch.equal(opt.state[p]["exp_avg_diff"], torch.zeros(3))
    assert torch.equal(opt.state[p]["prev_grad"], p.grad)
    p.grad = torch.tensor([2.0, -2.0, 0.0])
    opt.step()
    torch.testing.assert_close(opt.state[p]["exp_avg_diff"], (1 - 0.92) * torch.tensor([1.0, 0.0, -3.0]))


# --- the functional ops' meta-gradients over several steps, against the reference's autograd ---------

def _unroll(update, p0, w, lion):
    p = p0
    state = [torch.zeros_like(p0) for _ in range(1 if lion else 4)]
    for t in range(4):
        g = torch.sin(3 * p) * w[t]
        if lion:
            (p,), (m,) = update([p], [g], state, lr=0.05, beta1=0.9, beta2=0.99, weight_decay=0.3, maximize=False)
            state = [m]
        else:
            (p,), *rest = update([p], [g], *[[s] for s in state], step=t + 1, lr=0.05, beta1=0.98, beta2=0.92,
                                 beta3=0.99, eps=1e-3, weight_decay=0.1, no_prox=False, maximize=False)
            state = [s[0] for s in rest]
    return (p * p).sum() + sum((s * s).sum() for s in state)


@pytest.mark.parametrize("name", ["lion_update", "adan_update"])
def test_meta_gradient_over_steps_matches_reference_autograd(name):
    lion = name == "lion_update"
    gen = torch.Generator().manual_seed(0)
    p0 = torch.randn(6, generator=gen, dtype=torch.float64, requires_grad=True)
    w = (torch.rand(4, 6, generator=gen, dtype=torch.float64) + 0.5).requires_grad_()

    def fused(lists_p, lists_g, *state, **kw):
        kwargs = dict(kw)
        return fused_optim.ops.apply_functional(name, [lists_p, lists_g, *state], kwargs)

    ours = torch.autograd.grad(_unroll(fused, p0, w, lion), (p0, w))
    ref = torch.autograd.grad(_unroll(getattr(_reference, name), p0, w, lion), (p0, w))
    for a, b in zip(ours, ref):
        assert a.abs().sum() > 0
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_lion_meta_gradient_flows_through_decay_and_momentum_only():
    # d p'/d p is the decay 1 - lr wd exactly (sign() has no derivative), and the gradient reaches
    # the loss only through the momentum.
    lr, wd = 0.1, 0.5
    p = torch.tensor([0.3, -2.0], dtype=torch.float64, requires_grad=True)
    g = torch.tensor([1.0, -1.0], dtype=torch.float64, requires_grad=True)
    m = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    (new_p,), (new_m,) = F.lion_update([p], [g], [m], lr=lr, weight_decay=wd)
    dp, dg, dm = torch.autograd.grad(new_p.sum(), (p, g, m), retain_graph=True, materialize_grads=True)
    torch.testing.assert_close(dp, torch.full_like(p, 1 - lr * wd), rtol=1e-15, atol=0)
    assert not dg.any() and not dm.any()
    dg, dm = torch.autograd.grad(new_m.sum(), (g, m))
    torch.testing.assert_close(dg, torch.full_like(g, 1 - 0.99), rtol=1e-15, atol=0)
    torch.testing.assert_close(dm, torch.full_like(m, 0.99), rtol=1e-15, atol=0)


def test_functional_checks():
    z = torch.zeros(2)
    with pytest.raises(TypeError, match="triple"):
        F.adan_update([z], [z], [z], [z], [z], [z], 1, betas=(0.9, 0.9))
    with pytest.raises(ValueError, match="beta3"):
        F.adan_update([z], [z], [z], [z], [z], [z], 1, betas=(0.9, 0.9, 1.0))
    with pytest.raises(ValueError, match="step"):
        F.adan_update([z], [z], [z], [z], [z], [z], 0)
    with pytest.raises(ValueError, match="learning rate"):
        F.lion_update([z], [z], [z], lr=-1.0)
    with pytest.raises(ValueError, match="exp_avgs"):
        F.lion_update([z], [z], [])
    assert math.isclose(F.lion_update([torch.ones(1)], [torch.ones(1)], [torch.zeros(1)], lr=0.25).params[0].item(),
                        0.75)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available() or not fused_optim.BUILD_INFO["cuda"],
                    reason="needs a CUDA device and a CUDA build")
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name, kwargs", CONFIGS)
def test_cuda_step_matches_the_cpu_step(name, kwargs, dtype):
    # The same math headers: this checks the CUDA launch (40 tensors cross a 32-tensor table,
    # 3M elements span many blocks) against the CPU kernel.
    shapes = [(), (7,), (3, 5)] + [(257,)] * 37 + [(3_000_000,)]
    gen = torch.Generator().manual_seed(0)
    cpu = [torch.randn(s, generator=gen, dtype=dtype).requires_grad_() for s in shapes]
    gpu = [p.detach().cuda().requires_grad_() for p in cpu]
    opts = [getattr(fused_optim, name)(ps, **kwargs) for ps in (cpu, gpu)]
    for step in range(4):
        for a, b, g in zip(cpu, gpu, twins.grads(cpu, step)):
            a.grad, b.grad = g, g.cuda()
        for opt in opts:
            opt.step()
    for a, b in zip(cpu, gpu):
        torch.testing.assert_close(b.cpu(), a, **TOL[dtype])
