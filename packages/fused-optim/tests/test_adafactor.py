"""Adafactor's op beyond the shared batteries: both kinds of parameters in one step, the factored
state's checks, and batches of matrices."""

from __future__ import annotations

import copy

import pytest
import torch

import fused_optim
from fused_optim.ops import adafactor_step_


def _pair(shapes, dtype=torch.float64, **kwargs):
    gen = torch.Generator().manual_seed(0)
    ref = [torch.randn(s, generator=gen, dtype=dtype).requires_grad_() for s in shapes]
    ours = [p.detach().clone().requires_grad_() for p in ref]
    return ref, ours, torch.optim.Adafactor(ref, **kwargs), fused_optim.Adafactor(ours, **kwargs)


def test_batches_of_matrices_and_vectors_in_one_group_match_torch():
    shapes = [(4, 3, 5), (2, 2, 3, 1), (6,), (), (1, 7)]
    ref, ours, r, o = _pair(shapes, lr=0.02, weight_decay=0.1)
    gen = torch.Generator().manual_seed(1)
    for _ in range(15):
        for a, b in zip(ref, ours):
            g = torch.randn(a.shape, generator=gen, dtype=a.dtype)
            a.grad, b.grad = g.clone(), g.clone()
        r.step()
        o.step()
    for a, b in zip(ref, ours):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)
    for p_ref, p_ours in zip(ref, ours):
        assert r.state[p_ref].keys() == o.state[p_ours].keys()
        for key, value in r.state[p_ref].items():
            torch.testing.assert_close(o.state[p_ours][key], value, rtol=1e-12, atol=1e-14)


def test_a_factored_state_of_the_wrong_shape_is_rejected_before_any_write():
    _, ours, _, opt = _pair([(3, 4), (5,)], lr=0.01)
    for p in ours:
        p.grad = torch.ones_like(p)
    opt.step()
    opt.state[ours[0]]["row_var"] = torch.zeros(4, 1, dtype=torch.float64)
    before = copy.deepcopy(opt.state_dict()), [p.detach().clone() for p in ours]
    with pytest.raises(ValueError, match="row_vars\\[0\\] has shape"):
        opt.step()
    assert all(torch.equal(p.detach(), q) for p, q in zip(ours, before[1]))
    assert opt.state[ours[1]]["step"].item() == 1.0  # the other call did not run either


def test_the_op_checks_its_lists_against_the_variant():
    p, g, step = torch.ones(3, 2), torch.ones(3, 2), torch.tensor(0.0)
    kwargs = dict(lr=0.01, beta2_decay=-0.8, eps1=1e-30, eps2=1e-3, d=1.0, weight_decay=0.0, maximize=False)
    with pytest.raises(ValueError, match="empty"):
        adafactor_step_([p], [g], [torch.zeros(3, 1)], [torch.zeros(1, 2)], [torch.zeros(3, 2)], [step],
                        factored=True, **kwargs)
    with pytest.raises(ValueError, match="two or more"):
        adafactor_step_([torch.ones(3)], [torch.ones(3)], [torch.zeros(3)], [torch.zeros(3)], [], [step],
                        factored=True, **kwargs)
    with pytest.raises(ValueError, match="beta2_decay"):
        adafactor_step_([p], [g], [torch.zeros(3, 1)], [torch.zeros(1, 2)], [], [step], factored=True,
                        **dict(kwargs, beta2_decay=0.5))
    assert step.item() == 0.0 and torch.equal(p, torch.ones(3, 2))


def test_float32_matches_torch():
    ref, ours, r, o = _pair([(8, 16), (16,)], dtype=torch.float32, lr=0.01)
    gen = torch.Generator().manual_seed(2)
    for _ in range(20):
        for a, b in zip(ref, ours):
            g = torch.randn(a.shape, generator=gen)
            a.grad, b.grad = g.clone(), g.clone()
        r.step()
        o.step()
    for a, b in zip(ref, ours):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
