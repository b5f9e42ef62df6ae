"""The multi-tensor (torch._foreach_*) paths against the per-leaf math they replace (float64).

Adam's update, a chain fusing Adam with the scale by -lr and the parameter addition, scale,
apply_updates and MetaSGD take one foreach op for all leaves in plain eager autograd; the
per-leaf path (forced here by patching ``can_use_foreach``) is what runs under torch.func.
Values, states and derivatives up to third order must agree, and stay finite where a gradient
entry is exactly zero.
"""

import pytest
import torch
import torch.nn.functional as F
from helpers import regression_task, small_mlp

import diffopt
from diffopt.transform import _leafwise
from diffopt.transform import adam as adam_module
from diffopt.update import add_leaves

SHAPES = [(6, 2), (6,), (1, 6), (1,), (3, 1, 2)]  # (6, 2)...(1,): torch's foreach addcdiv bug


def _force_per_leaf(monkeypatch):
    """Force the per-leaf math everywhere (as under torch.func)."""
    for module in (_leafwise, adam_module):
        monkeypatch.setattr(module, "can_use_foreach", lambda tensors: False)


def _leaves(seed, zero_rows=True):
    generator = torch.Generator().manual_seed(seed)
    leaves = [torch.randn(*shape, generator=generator, dtype=torch.float64) for shape in SHAPES]
    if zero_rows:
        leaves[0][:2] = 0.0  # exactly-zero gradient entries (dead units)
        leaves[3].zero_()
    return leaves


def _run(tx, steps, params, grad_seed, per_leaf_mode, monkeypatch, fused):
    """Several updates of ``tx``; returns the final params and the state."""
    if per_leaf_mode:
        _force_per_leaf(monkeypatch)
    state = tx.init(tuple(params))
    for step in range(steps):
        grads = tuple(g * (1 + step) * p.sum() for g, p in zip(_leaves(grad_seed + step), params))
        if fused:
            params, state = tx._update_and_apply(grads, state, tuple(params))
        else:
            updates, state = tx.update(grads, state, params=tuple(params), inplace=False)
            params = diffopt.apply_updates(tuple(params), updates, inplace=False)
    monkeypatch.undo()
    return list(params), state


@pytest.mark.parametrize("kwargs", [
    dict(lr=0.05),
    dict(lr=0.05, eps_root=1e-8, betas=(0.8, 0.95)),
    dict(lr=0.1, weight_decay=0.1, maximize=True),
    dict(lr=0.05, eps=0.0, eps_root=1e-10),
])
@pytest.mark.parametrize("fused", [False, True])
def test_adam_foreach_equals_per_leaf_to_third_order(kwargs, fused, monkeypatch):
    theta = [p.requires_grad_() for p in _leaves(0, zero_rows=False)]
    tx = diffopt.adam(moment_requires_grad=True, **kwargs)
    ours, state = _run(tx, 3, theta, 10, False, monkeypatch, fused)
    reference, ref_state = _run(tx, 3, theta, 10, True, monkeypatch, fused)
    for a, b in zip(ours, reference):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)
    for a, b in zip(state[-2].nu, ref_state[-2].nu):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)
    assert int(state[-2].count) == int(ref_state[-2].count) == 3
    # First, second and third derivatives of a scalar of the result w.r.t. the initial params.
    f_ours, f_ref = (sum((p ** 3).sum() for p in ps) for ps in (ours, reference))
    for order in range(3):
        g_ours = torch.autograd.grad(f_ours, theta, create_graph=True)
        g_ref = torch.autograd.grad(f_ref, theta, create_graph=True)
        for a, b in zip(g_ours, g_ref):
            assert torch.isfinite(a).all()
            torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12, msg=f"order {order + 1}")
        f_ours = sum((g * g).sum() for g in g_ours)
        f_ref = sum((g * g).sum() for g in g_ref)


def test_adam_foreach_step_passes_gradcheck_and_gradgradcheck():
    """One fused step as a function of params, grads and moments (away from v = 0)."""
    generator = torch.Generator().manual_seed(3)
    shapes = SHAPES[:4]

    def make():
        return [torch.randn(*s, generator=generator, dtype=torch.float64).requires_grad_()
                for s in shapes]

    params, grads, mus = make(), make(), make()
    nus = [(torch.rand(*s, generator=generator, dtype=torch.float64) + 0.1).requires_grad_()
           for s in shapes]
    n = len(shapes)

    def step(*tensors):
        p, g, m, v = (list(tensors[i * n:(i + 1) * n]) for i in range(4))
        out, m, v = adam_module._adam_multi_tensor(g, m, v, 2, 0.9, 0.99, 1e-3, 0.0, -0.1, p)
        return (*out, *m, *v)

    inputs = tuple(params + grads + mus + nus)
    assert torch.autograd.gradcheck(step, inputs)
    assert torch.autograd.gradgradcheck(step, inputs)


def test_adam_foreach_zero_gradients_finite_and_exact():
    """Where g (so m and v) is exactly 0 the first direction g / (|g| + eps) is 0, and its
    derivative there is exactly 1 / eps (a plain sqrt would give NaN)."""
    g = [torch.tensor([0.0, 2.0], dtype=torch.float64, requires_grad=True)]
    eps = 1e-8
    tx = diffopt.transform.scale_by_adam(eps=eps)
    out, _ = tx.update(g, tx.init(g))
    assert out[0][0].item() == 0.0 and torch.isfinite(out[0]).all()
    (grad,) = torch.autograd.grad(out[0].sum(), g, create_graph=True)
    torch.testing.assert_close(grad, torch.tensor([1 / eps, eps / (2 + eps) ** 2],
                                                  dtype=torch.float64))
    (second,) = torch.autograd.grad(grad.sum(), g)
    assert torch.isfinite(second).all()


def test_adam_without_eps_keeps_the_per_leaf_math(monkeypatch):
    """eps = eps_root = 0: the per-leaf path on both sides (0 / 0 at all-zero entries, as
    torch.optim.Adam), so eager and torch.func results cannot differ there."""
    g = [torch.tensor([0.0, 2.0], dtype=torch.float64)]
    tx = diffopt.transform.scale_by_adam(eps=0.0)
    eager, _ = tx.update(g, tx.init(g))
    _force_per_leaf(monkeypatch)
    per_leaf, _ = tx.update(g, tx.init(g))
    torch.testing.assert_close(eager[0], per_leaf[0], equal_nan=True)
    # g / |g| = 1 through the bias corrections and a root: to within a few float64 ulps, not exactly
    assert torch.isnan(eager[0][0]) and eager[0][1].item() == pytest.approx(1.0, rel=1e-14, abs=0)


def test_chain_fuses_adam_and_scale_with_the_same_state():
    params = tuple(p.requires_grad_() for p in _leaves(1, zero_rows=False))
    fused = diffopt.chain(diffopt.transform.scale_by_adam(), diffopt.scale(-0.1))
    unfused = diffopt.chain(diffopt.transform.scale_by_adam(), diffopt.scale(torch.tensor(-0.1,
                                                               dtype=torch.float64)))
    grads = tuple(_leaves(2))
    out_f, state_f = fused.update(grads, fused.init(params))
    out_u, state_u = unfused.update(grads, unfused.init(params))
    assert isinstance(state_f[1], diffopt.base.EmptyState)
    assert type(state_f[0]) is type(state_u[0])
    for a, b in zip(out_f, out_u):
        torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-15)
    new_params, _ = fused._update_and_apply(grads, fused.init(params), params)
    for p, new, u in zip(params, new_params, out_f):
        torch.testing.assert_close(new, p + u, rtol=1e-13, atol=1e-15)


def test_none_gradients_keep_their_leaf_and_state():
    params = tuple(_leaves(4, zero_rows=False))
    tx = diffopt.adam(0.1)
    grads = (None, *_leaves(5)[1:])
    state = tx.init(params)
    updates, new_state = tx.update(grads, state)
    assert updates[0] is None and new_state[0].mu[0] is state[0].mu[0]
    new_params, _ = tx._update_and_apply(grads, state, params)
    assert new_params[0] is params[0]
    for p, new, u in zip(params[1:], new_params[1:], updates[1:]):
        torch.testing.assert_close(new, p + u)


def test_mixed_dtypes_take_the_per_leaf_path():
    leaves = [torch.ones(2, dtype=torch.float64), torch.ones(2, dtype=torch.float32)]
    assert not _leafwise.can_use_foreach(leaves)
    assert not _leafwise.can_use_foreach([torch.ones(2, dtype=torch.float16)])
    assert not _leafwise.can_use_foreach([torch.ones(2).to_sparse()])
    assert _leafwise.can_use_foreach([torch.ones(2), torch.nn.Parameter(torch.ones(3))])
    tx = diffopt.adam(0.1)
    updates, _ = tx.update(leaves, tx.init(leaves))
    assert [u.dtype for u in updates] == [torch.float64, torch.float32]
    torch.testing.assert_close(updates[1], torch.full((2,), -0.1))


def test_no_foreach_under_torch_func_or_forward_ad():
    seen = []
    leaves = [torch.ones(2)]

    def probe(x):
        seen.append(_leafwise.can_use_foreach([x]))
        return x

    torch.func.vmap(probe)(torch.ones(3, 2))
    with torch.autograd.forward_ad.dual_level():
        seen.append(_leafwise.can_use_foreach(leaves))
    assert seen == [False, False] and _leafwise.can_use_foreach(leaves)


def test_add_leaves_with_alpha():
    p = [torch.ones(2), torch.zeros(1), torch.ones(1)]
    out = add_leaves(p, [torch.ones(2), None, torch.full((1,), 2.0)], -0.5)
    assert out[1] is p[1]
    torch.testing.assert_close(out[0], torch.full((2,), 0.5))
    torch.testing.assert_close(out[2], torch.zeros(1))


@pytest.mark.parametrize("cls,kwargs", [(diffopt.MetaSGD, dict(lr=0.3)),
                                        (diffopt.MetaAdam, dict(lr=0.05))])
def test_meta_optimizer_foreach_equals_per_leaf(cls, kwargs, monkeypatch):
    x_s, y_s, x_q, y_q = regression_task(seed=6)
    results = []
    for patched in (False, True):
        if patched:
            _force_per_leaf(monkeypatch)
        net = small_mlp(seed=5)
        theta0 = list(net.parameters())
        opt = cls(net, **kwargs)
        for _ in range(3):
            opt.step(F.mse_loss(net(x_s), y_s))
        loss = F.mse_loss(net(x_q), y_q)
        results.append((loss, torch.autograd.grad(loss, theta0)))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-12, atol=1e-14)
    for a, b in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-13)
