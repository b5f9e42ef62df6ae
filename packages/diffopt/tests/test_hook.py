"""Hooks registered through the optimizer act on the gradients flowing back through updates."""

import torch

import diffopt


def test_zero_nan_hook_cleans_meta_gradient():
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    updates = [x * 1.0]
    tx = diffopt.chain(diffopt.register_hook(diffopt.hook.zero_nan_hook), diffopt.scale(1.0))
    (out,), _ = tx.update(updates, tx.init(None))
    # a NaN arrives from downstream; the hook on the update zeroes it before it reaches x
    (out * torch.tensor([float("nan"), 1.0])).sum().backward()
    assert torch.equal(x.grad, torch.tensor([0.0, 1.0]))


def test_nan_to_num_hook():
    hook = diffopt.hook.nan_to_num_hook(nan=1.0, posinf=2.0, neginf=-2.0)
    out = hook(torch.tensor([float("nan"), float("inf"), -float("inf"), 3.0]))
    assert torch.equal(out, torch.tensor([1.0, 2.0, -2.0, 3.0]))


def test_nan_to_num_transform():
    tx = diffopt.nan_to_num(nan=-1.0)
    (out,), _ = tx.update([torch.tensor([float("nan"), 1.0])], tx.init(None))
    assert torch.equal(out, torch.tensor([-1.0, 1.0]))
