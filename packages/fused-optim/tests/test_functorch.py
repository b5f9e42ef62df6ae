"""The functional ops under torch.func: vmap rules (one kernel call per batch) and the named
autograd nodes under grad, vmap(grad) and jacrev, against per-sample loops and the reference."""

from __future__ import annotations

import pytest
import torch
from helpers import FUNCTIONAL_CASES, op, tolerances
from torch.profiler import profile

from fused_optim import _reference
from fused_optim import functional as F
from fused_optim.ops import FUNCTIONAL_OPS, apply_functional

CASES = [pytest.param(c, id=c.id) for c in FUNCTIONAL_CASES]
B = 3  # batch size


def _batched(case, seed=0):
    """Per-sample inputs (one ``case.make`` per sample) and the same stacked along dim 0."""
    samples = [case.make(torch.float64, seed=seed + b) for b in range(B)]
    stacked = [[torch.stack([s[k][i] for s in samples]) for i in range(len(samples[0][k]))]
               for k in range(len(samples[0]))]
    return samples, stacked


def _in_dims(lists, unbatched):
    """vmap in_dims: list ``k`` unbatched where ``unbatched[k]``, else batched along dim 0."""
    return tuple(None if unbatched[k] else [0] * len(lst) for k, lst in enumerate(lists))


def _mix(samples, stacked, unbatched, b):
    """Sample ``b``'s inputs when the lists marked ``unbatched`` are shared (sample 0's)."""
    return [samples[0][k] if unbatched[k] else samples[b][k] for k in range(len(stacked))]


def _assert_lists_close(got, want, **tol):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            torch.testing.assert_close(x, y, **tol)


@pytest.mark.parametrize("share_state", [False, True], ids=["all-batched", "shared-state"])
@pytest.mark.parametrize("case", CASES)
def test_vmap_of_op_equals_per_sample_loop(case, share_state):
    samples, stacked = _batched(case)
    # shared-state: only params and grads (the first two lists) carry the batch dimension.
    unbatched = [share_state and k >= 2 for k in range(len(stacked))]
    inputs = [samples[0][k] if unbatched[k] else stacked[k] for k in range(len(stacked))]
    got = torch.vmap(lambda *lists: op(case.op)(*lists, **case.kwargs), in_dims=_in_dims(inputs, unbatched))(*inputs)
    per_sample = [op(case.op)(*_mix(samples, stacked, unbatched, b), **case.kwargs) for b in range(B)]
    want = [[torch.stack([per_sample[b][k][i] for b in range(B)]) for i in range(len(per_sample[0][k]))]
            for k in range(len(per_sample[0]))]
    _assert_lists_close(got, want, **tolerances(torch.float64))


@pytest.mark.parametrize("share_saved", [False, True], ids=["all-batched", "shared-saved"])
@pytest.mark.parametrize("case", CASES)
def test_vmap_of_backward_op_equals_per_sample_loop(case, share_saved):
    spec = FUNCTIONAL_OPS[case.op]
    samples, stacked = _batched(case)
    outputs = op(case.op)(*samples[0], **case.kwargs)
    gen = torch.Generator().manual_seed(3)
    # Batched cotangents against shared saved inputs is what jacrev and vmap(vjp) produce.
    cotangents = [[torch.randn((B, *t.shape), generator=gen, dtype=t.dtype) for t in out] for out in outputs]
    saved = [samples[0][i] if share_saved else stacked[i] for i in spec.saved]
    in_dims = (*([0] * len(c) for c in cotangents), *(None if share_saved else [0] * len(s) for s in saved))
    got = torch.vmap(lambda *args: op(case.op + "_backward")(*args, **case.kwargs),
                     in_dims=in_dims)(*cotangents, *saved)
    per_sample = [op(case.op + "_backward")(*[[t[b] for t in c] for c in cotangents],
                                            *[samples[0 if share_saved else b][i] for i in spec.saved],
                                            **case.kwargs)
                  for b in range(B)]
    want = [[torch.stack([per_sample[b][k][i] for b in range(B)]) for i in range(len(per_sample[0][k]))]
            for k in range(len(per_sample[0]))]
    _assert_lists_close(got, want, **tolerances(torch.float64))


def _loss(case):
    """A scalar of every output list of ``case``'s op, through its named autograd node."""
    def loss(*lists):
        outputs = apply_functional(case.op, [list(x) for x in lists], case.kwargs)
        return sum((t * t).sum() + t.sum() for out in outputs for t in out)
    return loss


@pytest.mark.parametrize("case", CASES)
def test_vmap_of_grad_equals_per_sample_grads(case):
    samples, stacked = _batched(case)
    argnums = tuple(k for k, lst in enumerate(stacked) if lst)
    got = torch.vmap(torch.func.grad(_loss(case), argnums=argnums))(*stacked)
    for b in range(B):
        leaves = [[t.clone().requires_grad_() for t in lst] for lst in samples[b]]
        ref = getattr(_reference, case.op)(*leaves, **case.kwargs)
        total = sum((t * t).sum() + t.sum() for out in ref for t in out)
        flat = [t for k in argnums for t in leaves[k]]
        want = torch.autograd.grad(total, flat, allow_unused=True)
        got_b = [t[b] for g in got for t in g]
        for x, y, leaf in zip(got_b, want, flat):
            torch.testing.assert_close(x, torch.zeros_like(leaf) if y is None else y, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("case", CASES)
def test_jacrev_matches_reference_jacobian(case):
    lists = case.make(torch.float64, shapes=[(3,), (2,)])
    ours = torch.func.jacrev(lambda p: apply_functional(case.op, [[p, *lists[0][1:]], *lists[1:]],
                                                        case.kwargs)[0][0])(lists[0][0])
    want = torch.autograd.functional.jacobian(
        lambda p: getattr(_reference, case.op)([p, *lists[0][1:]], *lists[1:], **case.kwargs)[0][0], lists[0][0])
    torch.testing.assert_close(ours, want, rtol=1e-10, atol=1e-12)


def _kernel_calls(fn):
    with profile() as prof:
        fn()
    return sum(1 for e in prof.events() if e.name in ("fused_optim::adam_update", "fused_optim::adam_update_backward"))


def test_one_kernel_call_serves_the_whole_batch():
    z = torch.zeros(4, dtype=torch.float64)

    def loss(p, g):
        return F.adam_update([p], [g], [z], [z], 2, lr=0.1).params[0].pow(2).sum()

    def calls(batch):
        p, g = torch.randn(batch, 4, dtype=torch.float64), torch.randn(batch, 4, dtype=torch.float64)
        return _kernel_calls(lambda: torch.vmap(torch.func.grad(loss))(p, g))

    assert calls(2) == calls(16) > 0  # not one call per sample


def test_gradcheck_under_vmap():
    case = next(c for c in FUNCTIONAL_CASES if c.op == "adam_update" and c.kwargs["amsgrad"])
    samples, stacked = _batched(case)
    leaves = [t.detach().clone().requires_grad_() for t in (stacked[0][1], stacked[1][1], stacked[2][1])]

    def fn(p, g, m):
        def one(p, g, m):
            lists = [[p], [g], [m], [samples[0][3][1]], [samples[0][4][1]]]
            return apply_functional("adam_update", lists, case.kwargs)[0][0]
        return torch.vmap(one)(p, g, m)

    assert torch.autograd.gradcheck(fn, leaves)


def test_second_order_under_torch_func_raises_clear_error():
    z = torch.zeros(3, dtype=torch.float64)

    def inner(p):
        return F.adam_update([p], [p * p], [z], [z], 1, eps=1e-3).params[0].sum()

    p = torch.ones(3, dtype=torch.float64)
    torch.func.grad(inner)(p)  # first order is fine
    with pytest.raises(RuntimeError, match="not itself differentiable"):
        torch.func.grad(lambda p: torch.func.grad(inner)(p).sum())(p)


def test_raw_op_under_grad_transform_points_to_the_functional_api():
    z = torch.zeros(2, dtype=torch.float64)

    def loss(p):
        (new,), _ = op("adagrad_update")([p], [p], [z], step=1, lr=0.1, lr_decay=0.0, weight_decay=0.0, eps=1e-3,
                                         maximize=False)
        return new.sum()

    with pytest.raises(RuntimeError, match=r"fused_optim\.functional"):
        torch.func.grad(loss)(torch.ones(2, dtype=torch.float64))
    # Without gradients the raw op vmaps like any other.
    out = torch.vmap(lambda p: op("adagrad_update")([p], [p], [z], step=1, lr=0.1, lr_decay=0.0, weight_decay=0.0,
                                                    eps=1e-3, maximize=False)[0][0])(torch.ones(3, 2, dtype=torch.float64))
    assert out.shape == (3, 2)


def test_raw_op_records_named_node():
    g = torch.randn(3, requires_grad=True)
    directions, _, _ = op("adam_direction")([g], [torch.zeros(3)], [torch.zeros(3)], step=1, beta1=0.9, beta2=0.999,
                                            eps=1e-8, eps_root=0.0)
    assert directions[0].grad_fn.name() == "FusedAdamDirectionBackward"
