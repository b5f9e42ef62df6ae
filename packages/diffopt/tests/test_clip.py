"""clip_grad_norm against torch.nn.utils.clip_grad_norm_."""

import math

import pytest
import torch

import diffopt


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.1, 1.0, 100.0])
def test_matches_torch(norm_type, max_norm):
    torch.manual_seed(0)
    grads = [torch.randn(3, 4, dtype=torch.float64), torch.randn(5, dtype=torch.float64)]
    params = [torch.zeros_like(g, requires_grad=True) for g in grads]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type)
    tx = diffopt.clip_grad_norm(max_norm, norm_type=norm_type)
    clipped, _ = tx.update(grads, tx.init(grads))
    for c, p in zip(clipped, params):
        torch.testing.assert_close(c, p.grad)


def test_nonfinite_raises_when_asked():
    tx = diffopt.clip_grad_norm(1.0, error_if_nonfinite=True)
    with pytest.raises(RuntimeError, match="non-finite"):
        tx.update([torch.tensor([float("inf")])], tx.init(None))


def test_differentiable_and_none_leaves():
    g = torch.tensor([3.0, 4.0], dtype=torch.float64, requires_grad=True)
    tx = diffopt.clip_grad_norm(1.0)
    (out, skipped), _ = tx.update([g, None], tx.init(None))
    assert skipped is None
    assert torch.autograd.gradcheck(lambda x: tx.update([x], tx.init(None))[0][0], (g,))
    torch.testing.assert_close(out, g.detach() / (5 + 1e-6))
