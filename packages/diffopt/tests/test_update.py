"""apply_updates: in place vs out of place, None updates, mismatches."""

import pytest
import torch

import diffopt


def test_out_of_place_is_differentiable():
    p = torch.ones(2, dtype=torch.float64, requires_grad=True)
    u = torch.full((2,), 0.5, dtype=torch.float64, requires_grad=True)
    (new,) = diffopt.apply_updates((p,), (u,), inplace=False)
    assert torch.equal(new.detach(), torch.full((2,), 1.5, dtype=torch.float64))
    new.sum().backward()
    assert torch.equal(u.grad, torch.ones(2, dtype=torch.float64))


def test_in_place_keeps_tensor_identity():
    p = torch.zeros(2, requires_grad=True)
    out = diffopt.apply_updates({"p": p}, {"p": torch.ones(2)})
    assert out["p"] is p and torch.equal(p.detach(), torch.ones(2))


def test_none_updates_skip():
    p = [torch.ones(1), torch.ones(1)]
    out = diffopt.apply_updates(p, [None, torch.ones(1)], inplace=False)
    assert out[0] is p[0] and out[1].item() == 2.0


def test_mismatches_raise_and_do_not_corrupt():
    p = [torch.ones(2), torch.ones(2)]
    with pytest.raises(ValueError, match="different structures"):
        diffopt.apply_updates(p, [torch.ones(2)])
    with pytest.raises(TypeError, match="shape"):
        diffopt.apply_updates(p, [torch.ones(2), torch.ones(3)])
    with pytest.raises(TypeError, match="dtype"):
        diffopt.apply_updates(p, [torch.ones(2), torch.ones(2, dtype=torch.float64)])
    assert all(torch.equal(t, torch.ones(2)) for t in p)  # the first leaf was not touched
