"""diffopt's Muon (``scale_by_muon``, the ``muon`` alias, ``Muon``, ``MetaMuon``) against
torch.optim.Muon, the accelerated path against the plain one, and its meta-gradient in float64
against gradcheck's finite differences."""

import pytest
import torch

import diffopt

LR = 0.02
# Both run the Newton-Schulz iteration in bfloat16, whose matrix products may round differently
# (batched against one at a time): see fused-optim's tests/test_muon.py for this bound.
PARAM_TOL = dict(rtol=0.0, atol=1e-3)
OPTIONS = [
    dict(),
    dict(nesterov=False, weight_decay=0.0, adjust_lr_fn="match_rms_adamw"),
    dict(momentum=0.3, ns_steps=3, ns_coefficients=(2.0, -1.5, 0.5), eps=1e-3, adjust_lr_fn="original"),
]
SHAPES = [(6, 6), (9, 3), (6, 6), (3, 9)]


def _matrices(dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=gen, dtype=dtype) for s in SHAPES]


@pytest.mark.parametrize("accelerated", [False, True], ids=["plain", "accelerated"])
@pytest.mark.parametrize("options", OPTIONS, ids=["defaults", "no-nesterov", "ns-options"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_muon_class_matches_torch_optim(options, accelerated, dtype):
    start = _matrices(dtype)
    theirs = [torch.nn.Parameter(p.clone()) for p in start]
    ours = [p.clone().requires_grad_() for p in start]
    torch_opt = torch.optim.Muon(theirs, lr=LR, **options)
    opt = diffopt.Muon(ours, lr=LR, **options, use_accelerated_op=accelerated)
    gen = torch.Generator().manual_seed(1)
    for _ in range(10):
        for a, b in zip(theirs, ours):
            g = torch.randn(a.shape, generator=gen, dtype=dtype)
            a.grad, b.grad = g.clone(), g.clone()
        torch_opt.step()
        opt.step()
    for a, b, s in zip(theirs, ours, start):
        torch.testing.assert_close(b.detach(), a.detach(), **PARAM_TOL)
        assert (b.detach() - s).abs().max() > 1e-2


def test_accelerated_is_the_plain_transform():
    params = _matrices()
    grads = _matrices(seed=2)
    results = []
    for accelerated in (False, True):
        tx = diffopt.muon(lr=0.1, ns_dtype=None, use_accelerated_op=accelerated)
        state = tx.init(params)
        for _ in range(3):
            updates, state = tx.update(grads, state, params=params)
        results.append((updates, state[0].mu))
    for plain, fused in zip(*[u + m for u, m in results]):
        torch.testing.assert_close(fused, plain, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("accelerated", [False, True], ids=["plain", "accelerated"])
def test_meta_gradient_through_two_steps_is_exact(accelerated):
    tx = diffopt.muon(lr=0.1, weight_decay=0.1, momentum=0.9, ns_steps=3, ns_dtype=None,
                      moment_requires_grad=True, use_accelerated_op=accelerated)
    target = [torch.full(s, 0.3, dtype=torch.float64) for s in ((3, 3), (4, 2), (3, 3))]

    def outer(*w0):
        params = list(w0)
        state = tx.init(params)
        for _ in range(2):
            grads = [2 * (p - t) for p, t in zip(params, target)]  # the inner loss's gradient
            updates, state = tx.update(grads, state, params=params, inplace=False)
            params = diffopt.apply_updates(params, updates, inplace=False)
        return sum((p * p).sum() for p in params)

    gen = torch.Generator().manual_seed(3)
    w0 = [torch.randn(t.shape, generator=gen, dtype=torch.float64, requires_grad=True) for t in target]
    assert torch.autograd.gradcheck(outer, w0)


def test_meta_muon_steps_like_the_alias():
    net = torch.nn.Sequential(torch.nn.Linear(3, 4, bias=False), torch.nn.Tanh(),
                              torch.nn.Linear(4, 2, bias=False)).double()
    w0 = [p.detach().clone() for p in net.parameters()]
    x = torch.randn(5, 3, dtype=torch.float64)
    meta = diffopt.MetaMuon(net, lr=0.05, ns_dtype=None)
    meta.step(net(x).pow(2).sum())
    params = [p.clone().requires_grad_() for p in w0]
    loss = torch.tanh(x @ params[0].T) @ params[1].T
    grads = torch.autograd.grad(loss.pow(2).sum(), params)
    tx = diffopt.muon(lr=0.05, ns_dtype=None)
    updates, _ = tx.update(list(grads), tx.init(w0), params=w0)
    for p, w, u in zip(net.parameters(), w0, updates):
        torch.testing.assert_close(p.detach(), w + u, rtol=1e-12, atol=1e-14)
        assert p.grad_fn is not None  # the new weights depend on the old ones


def test_bad_input_raises_clear_errors():
    with pytest.raises(ValueError, match="matrices only"):
        tx = diffopt.muon()
        tx.update([torch.ones(3)], tx.init([torch.zeros(3)]))
    with pytest.raises(ValueError, match="adjust_lr_fn"):
        diffopt.muon(adjust_lr_fn="other")
    with pytest.raises(ValueError, match="momentum"):
        diffopt.muon(momentum=-1.0)
    with pytest.raises(ValueError, match="ns_steps"):
        diffopt.muon(ns_steps=100)
    with pytest.raises(ValueError, match="learning rate"):
        diffopt.muon(lr=-1.0)


def test_a_none_gradient_leaves_its_leaf_alone():
    tx = diffopt.muon(lr=0.1, use_accelerated_op=True)
    params = [torch.ones(2, 2), torch.ones(3, 2)]
    state = tx.init(params)
    updates, new_state = tx.update([None, torch.ones(3, 2)], state, params=params)
    assert updates[0] is None and new_state[0].mu[0] is state[0].mu[0]
    assert updates[1].shape == (3, 2)
