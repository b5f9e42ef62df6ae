"""nan_to_num: replacement values, and in-place updates where autograd allows them."""

import torch

import diffopt


def test_inplace_update_returns_the_same_tensor():
    tx = diffopt.nan_to_num(0.0, 1.0, -1.0)
    g = torch.tensor([float("nan"), float("inf"), -float("inf"), 2.0])
    out, _ = tx.update(g, tx.init(None), inplace=True)
    assert out is g
    torch.testing.assert_close(g, torch.tensor([0.0, 1.0, -1.0, 2.0]))


def test_out_of_place_update_leaves_the_input_alone():
    tx = diffopt.nan_to_num(0.0, 1.0, -1.0)
    g = torch.tensor([float("nan"), 3.0])
    out, _ = tx.update([g], tx.init(None), inplace=False)
    assert out[0] is not g and torch.isnan(g[0])
    torch.testing.assert_close(out[0], torch.tensor([0.0, 3.0]))


def test_a_tensor_that_requires_grad_is_copied_and_stays_differentiable():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    g = w + torch.tensor([float("inf"), 8.0])  # in a graph: in place would corrupt backward
    tx = diffopt.nan_to_num(0.0, 7.0, -7.0)
    out, _ = tx.update([g], tx.init(None), inplace=True)
    assert out[0] is not g
    torch.testing.assert_close(out[0].detach(), torch.tensor([7.0, 10.0]))
    out[0].sum().backward()  # d nan_to_num(x)/dx = 1 where x is finite, 0 where replaced
    torch.testing.assert_close(w.grad, torch.tensor([0.0, 1.0]))
