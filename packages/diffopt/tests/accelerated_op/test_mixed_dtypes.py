"""use_accelerated_op=True on a parameter tree that mixes dtypes: the fused ops take one dtype per
call, so diffopt makes one call per dtype and puts the results back in the tree's order."""

import inspect

import pytest
import torch

import diffopt
from diffopt.accelerated_op import fused_update, is_available

pytestmark = pytest.mark.skipif(not is_available("cpu"), reason="fused-optim's CPU ops are not available")

ACCELERATED = [name for name in ("adam", "adamw", "nadam", "asgd", "adan", "lion", "rprop", "adafactor")
               if "use_accelerated_op" in inspect.signature(getattr(diffopt, name)).parameters]


def _tree():
    gen = torch.Generator().manual_seed(0)
    # float32 and float64 interleaved (a matrix among them, for Adafactor's factored branch).
    params = {"a": torch.randn(3, 4, generator=gen), "b": torch.randn(5, generator=gen, dtype=torch.float64),
              "c": torch.randn(2, generator=gen), "d": torch.randn(3, 2, generator=gen, dtype=torch.float64)}
    params = {k: v.requires_grad_() for k, v in params.items()}
    grads = {k: torch.randn(v.shape, generator=gen, dtype=v.dtype).requires_grad_() for k, v in params.items()}
    return params, grads


def _three_steps(name, accelerated, params, grads):
    tx = getattr(diffopt, name)(lr=0.1, use_accelerated_op=accelerated)
    state = tx.init(params)
    for _ in range(3):
        updates, state = tx.update(grads, state, params=params, inplace=False)
    return updates


def test_the_check_covers_the_accelerated_aliases():
    assert {"adam", "nadam", "adan", "lion", "adafactor"} <= set(ACCELERATED)


@pytest.mark.parametrize("name", ACCELERATED)
def test_mixed_dtype_tree_equals_the_plain_transform(name):
    params, grads = _tree()
    plain = _three_steps(name, False, params, grads)
    fused = _three_steps(name, True, params, grads)
    for key in params:
        assert fused[key].dtype == params[key].dtype
        torch.testing.assert_close(fused[key], plain[key], rtol=1e-5, atol=1e-6)
    # The meta-gradient flows back to each tensor through its own group's fused node.
    leaves = [*params.values(), *grads.values()]
    got = torch.autograd.grad(sum((u * u).sum() for u in fused.values()), leaves, allow_unused=True)
    want = torch.autograd.grad(sum((u * u).sum() for u in plain.values()), leaves, allow_unused=True)
    for a, b in zip(got, want):
        assert (a is None) == (b is None)
        if a is not None:
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_fused_update_groups_by_dtype_and_keeps_order_and_scalars():
    # NAdam returns its new momentum product beside the lists: the same for every group.
    params = [torch.ones(2), torch.ones(3, dtype=torch.float64), torch.ones(1)]
    grads = [torch.full_like(p, float(i + 1)) for i, p in enumerate(params)]
    zeros = [torch.zeros_like(p) for p in params]
    out = fused_update("nadam_update", params, grads, zeros, zeros, 1, 1.0, lr=0.1)
    for i, p in enumerate(params):
        alone = fused_update("nadam_update", [p], [grads[i]], [zeros[i]], [zeros[i]], 1, 1.0, lr=0.1)
        assert out.params[i].dtype == p.dtype
        # one kernel, the same per-element math wherever a tensor sits in a call: bit for bit
        torch.testing.assert_close(out.params[i], alone.params[0], rtol=0, atol=0)
        torch.testing.assert_close(out.exp_avg_sqs[i], alone.exp_avg_sqs[0], rtol=0, atol=0)
    assert out.mu_product == alone.mu_product
