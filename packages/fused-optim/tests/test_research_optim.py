"""Lion and Adan, the optimizers torch.optim lacks: the fused drop-in classes against the pure-PyTorch
foreach classes in fused_optim._reference (every option, many steps, float64/float32), those against
a plain per-tensor transcription of each paper's update, state_dict round trips both ways, param
groups, closures, schedulers, complex/low-precision/NaN, atomic multi-group failure, and the
functional ops' meta-gradients against the reference's autograd over several steps."""

# ruff: noqa: B023  (closures run within the loop iteration that defines them)
from __future__ import annotations

import copy
import itertools
import math

import pytest
import torch

import fused_optim
from fused_optim import _reference
from fused_optim import functional as F

STEPS = 21
NAMES = ["Lion", "Adan"]
RICH = {"Lion": dict(lr=0.01, weight_decay=0.1), "Adan": dict(lr=0.01, weight_decay=0.02)}
TOL = {torch.float64: dict(rtol=1e-12, atol=1e-14), torch.float32: dict(rtol=1e-6, atol=1e-6)}


def _configs():
    out = []
    for betas, wd, maximize in itertools.product([(0.9, 0.99), (0.95, 0.98)], [0.0, 0.1], [False, True]):
        out.append(("Lion", dict(lr=0.01, betas=betas, weight_decay=wd, maximize=maximize)))
    for wd, no_prox, maximize in itertools.product([0.0, 0.02], [False, True], [False, True]):
        if wd == 0 and no_prox:
            continue
        out.append(("Adan", dict(lr=0.01, weight_decay=wd, no_prox=no_prox, maximize=maximize)))
    out.append(("Adan", dict(lr=0.02, betas=(0.9, 0.8, 0.999), eps=1e-6)))
    return out


CONFIGS = [pytest.param(name, kw, id=f"{name}-" + "-".join(f"{k}={v}" for k, v in kw.items()))
           for name, kw in _configs()]


def _params(dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    tensors = [
        torch.randn((), generator=gen, dtype=dtype),
        torch.randn(7, generator=gen, dtype=dtype),
        torch.randn(5, 3, generator=gen, dtype=dtype).t(),  # non-contiguous
        torch.randn(2, 3, 4, generator=gen, dtype=dtype),
    ]
    return [t.detach().clone().requires_grad_() if t.is_contiguous() else t.detach().requires_grad_()
            for t in tensors]


def _grads(params, step, seed=100):
    gen = torch.Generator().manual_seed(seed + step)
    return [torch.randn(p.shape, generator=gen, dtype=p.dtype) for p in params]


def _run_both(name, kwargs, dtype, steps=STEPS, make_params=_params):
    ref_params = make_params(dtype)
    our_params = [p.detach().clone().requires_grad_() for p in ref_params]
    ref = getattr(_reference, name)(ref_params, **kwargs)
    ours = getattr(fused_optim, name)(our_params, **kwargs)
    for step in range(steps):
        for a, b, g in zip(ref_params, our_params, _grads(ref_params, step)):
            a.grad, b.grad = g.clone(), g.clone()
        ref.step()
        ours.step()
    return ref, ours, ref_params, our_params


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("name, kwargs", CONFIGS)
def test_matches_pure_pytorch_foreach(name, kwargs, dtype):
    ref, ours, ref_params, our_params = _run_both(name, kwargs, dtype)
    for a, b in zip(ref_params, our_params):
        torch.testing.assert_close(b, a, **TOL[dtype])
    rs, os_ = ref.state_dict(), ours.state_dict()
    assert rs["param_groups"] == os_["param_groups"]
    for k, state in rs["state"].items():
        assert list(state) == list(os_["state"][k])
        for key, a in state.items():
            torch.testing.assert_close(os_["state"][k][key], a, **TOL[dtype])


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
    params = _params(torch.float64)
    opt = getattr(fused_optim, name)(params, **kwargs)
    mine = [p.detach().clone() for p in params]
    states = [None] * len(params)
    full = dict(dict(lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0) if name == "Lion" else
                dict(lr=1e-3, betas=(0.98, 0.92, 0.99), eps=1e-8, weight_decay=0.0, no_prox=False), maximize=False)
    full.update(kwargs)
    for step in range(1, 9):
        for i, (p, g) in enumerate(zip(params, _grads(params, step))):
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


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("direction", ["reference->ours", "ours->reference"])
def test_state_dict_round_trip(name, direction):
    classes = (getattr(_reference, name), getattr(fused_optim, name))
    src_cls, dst_cls = classes if direction == "reference->ours" else classes[::-1]
    params = _params(torch.float64)
    opt = src_cls(params, **RICH[name])
    for step in range(5):
        for p, g in zip(params, _grads(params, step)):
            p.grad = g
        opt.step()
    finals = []
    for cls in (src_cls, dst_cls):
        ps = [p.detach().clone().requires_grad_() for p in params]
        o = cls(ps, **RICH[name])
        o.load_state_dict(copy.deepcopy(opt.state_dict()))
        for step in range(5, 10):
            for p, g in zip(ps, _grads(ps, step)):
                p.grad = g
            o.step()
        assert [float(o.state[p]["step"]) for p in ps] == [10.0] * len(ps)
        finals.append(ps)
    for a, b in zip(*finals):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name", NAMES)
def test_param_groups_add_param_group_closure_and_scheduler(name):
    results = []
    for module in (_reference, fused_optim):
        torch.manual_seed(0)
        a = torch.randn(4, dtype=torch.float64, requires_grad=True)
        b = torch.randn(3, 2, dtype=torch.float64, requires_grad=True)
        c = torch.randn(5, dtype=torch.float64, requires_grad=True)
        opt = getattr(module, name)([{"params": [a]}, {"params": [b], "lr": 0.003, "weight_decay": 0.1}], lr=0.01)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
        losses = []
        for step in range(12):
            if step == 4:
                opt.add_param_group({"params": [c], "betas": opt.defaults["betas"][::-1]})

            def closure():
                opt.zero_grad()
                loss = (a.sin().sum() + (b * b).sum() + (c.cos().sum() if step >= 4 else 0)) * (1 + step % 3)
                loss.backward()
                return loss

            losses.append(float(opt.step(closure).detach()))
            sched.step()
        results.append((losses, [t.detach().clone() for t in (a, b, c)], opt.param_groups[0]["lr"]))
    assert results[0][0] == pytest.approx(results[1][0], rel=1e-12)
    for x, y in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(y, x, rtol=1e-12, atol=1e-14)
    assert results[0][2] == results[1][2]


@pytest.mark.parametrize("name", NAMES)
def test_tensor_lr_and_a_learning_rate_that_requires_grad(name):
    kw = dict(RICH[name], lr=torch.tensor(0.01, dtype=torch.float64))
    _, _, rp, op = _run_both(name, kw, torch.float64, steps=5)
    for a, b in zip(rp, op):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)
    # A learning rate that requires grad is the pure-PyTorch step's (as torch.optim's own path).
    kw["lr"] = torch.tensor(0.01, dtype=torch.float64, requires_grad=True)
    _, _, rp, op = _run_both(name, kw, torch.float64, steps=3)
    for a, b in zip(rp, op):
        torch.testing.assert_close(b, a, rtol=0, atol=0)


@pytest.mark.parametrize("name", NAMES)
def test_mixed_dtypes_complex_and_none_grads(name):
    def make(dtype):
        del dtype
        gen = torch.Generator().manual_seed(3)
        return [torch.randn(4, generator=gen, dtype=torch.float32).requires_grad_(),
                torch.randn(3, generator=gen, dtype=torch.float64).requires_grad_(),
                torch.randn(4, generator=gen, dtype=torch.complex128).requires_grad_()]

    _, ours, rp, op = _run_both(name, RICH[name], None, steps=6, make_params=make)
    torch.testing.assert_close(op[0], rp[0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(op[1], rp[1], rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(op[2], rp[2], rtol=1e-12, atol=1e-14)
    extra = torch.ones(2, requires_grad=True)
    ours.add_param_group({"params": [extra]})
    ours.step()  # no gradient: untouched, no state
    assert torch.equal(extra.detach(), torch.ones(2)) and extra not in ours.state


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", NAMES)
def test_low_precision_params_use_float32_math(name, dtype):
    gen = torch.Generator().manual_seed(0)
    p32 = [torch.randn(64, generator=gen).requires_grad_()]
    plo = [p32[0].detach().to(dtype).requires_grad_()]
    ref, ours = getattr(_reference, name)(p32, **RICH[name]), getattr(fused_optim, name)(plo, **RICH[name])
    for step in range(5):
        g = torch.randn(64, generator=torch.Generator().manual_seed(step))
        p32[0].grad, plo[0].grad = g.clone(), g.to(dtype)
        ref.step()
        ours.step()
    assert plo[0].dtype == dtype
    tol = 1e-2 if dtype == torch.float16 else 3e-2
    torch.testing.assert_close(plo[0].float(), p32[0].detach(), rtol=tol, atol=tol)


@pytest.mark.parametrize("name", NAMES)
def test_nan_and_inf_propagate_like_the_reference(name):
    ref_p = [torch.linspace(-1, 1, 6, dtype=torch.float64).requires_grad_()]
    our_p = [ref_p[0].detach().clone().requires_grad_()]
    ref, ours = getattr(_reference, name)(ref_p, **RICH[name]), getattr(fused_optim, name)(our_p, **RICH[name])
    for g in ([0.5, float("nan"), -0.5, 1.0, 0.0, 2.0], [float("inf"), 1.0, 0.0, float("-inf"), 0.3, 0.1],
              [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]):
        g = torch.tensor(g, dtype=torch.float64)
        ref_p[0].grad, our_p[0].grad = g.clone(), g.clone()
        ref.step()
        ours.step()
    assert our_p[0].isnan().any()
    torch.testing.assert_close(our_p[0], ref_p[0], rtol=1e-12, atol=1e-14, equal_nan=True)


@pytest.mark.parametrize("name", NAMES)
def test_sparse_gradients_rejected(name):
    p = torch.ones(3, requires_grad=True)
    for cls in (getattr(_reference, name), getattr(fused_optim, name)):
        opt = cls([p])
        p.grad = torch.ones(3).to_sparse()
        with pytest.raises(RuntimeError, match=f"{name} does not support sparse gradients"):
            opt.step()
        assert torch.equal(p.detach(), torch.ones(3)) and not opt.state


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
    assert fused_optim.Lion(p).defaults == dict(lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0, maximize=False)
    assert fused_optim.Adan(p).defaults == dict(lr=1e-3, betas=(0.98, 0.92, 0.99), eps=1e-8, weight_decay=0.0,
                                                no_prox=False, maximize=False)
    assert issubclass(fused_optim.Lion, torch.optim.Optimizer) and issubclass(fused_optim.Adan, torch.optim.Optimizer)


@pytest.mark.parametrize("name", NAMES)
def test_a_bad_second_group_leaves_the_first_untouched(name):
    a, b = torch.ones(3, requires_grad=True), torch.ones(2, requires_grad=True)
    opt = getattr(fused_optim, name)([{"params": [a]}, {"params": [b]}], **RICH[name])
    a.grad, b.grad = torch.ones(3), torch.ones(2)
    opt.step()
    snapshot = {k: v.clone() for k, v in opt.state[a].items()}
    a_before = a.detach().clone()
    opt.param_groups[1]["lr"] = -1.0
    with pytest.raises(ValueError, match="learning rate"):
        opt.step()
    assert torch.equal(a.detach(), a_before)
    assert all(torch.equal(opt.state[a][k], v) for k, v in snapshot.items())


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
        for a, b, g in zip(cpu, gpu, _grads(cpu, step)):
            a.grad, b.grad = g, g.cuda()
        for opt in opts:
            opt.step()
    for a, b in zip(cpu, gpu):
        torch.testing.assert_close(b.cpu(), a, **TOL[dtype])
