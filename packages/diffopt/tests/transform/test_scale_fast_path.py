"""scale by a number (the whole of sgd(lr)): its 0-d factor tensors, its chain, its checks."""

import pytest
import torch

import diffopt
from diffopt.transform._leafwise import ScalarTensors, pairs_fit


def test_scalar_tensors_made_once_per_dtype_and_exact():
    scalars = ScalarTensors(-0.1)
    a, b = scalars[torch.float32], scalars[torch.float32]
    assert a is b and a.dim() == 0 and a.dtype == torch.float32 and not a.requires_grad
    assert scalars[torch.float64].item() == -0.1  # the number itself in float64


def test_scalar_tensor_made_in_inference_mode_is_not_kept():
    scalars = ScalarTensors(2.0)
    with torch.inference_mode():
        assert scalars[torch.float32].is_inference()
    assert torch.float32 not in scalars
    assert not scalars[torch.float32].is_inference()


def test_scale_first_used_in_inference_mode_still_differentiates_later():
    tx = diffopt.scale(0.25)  # a fresh transformation: its first factor tensor is made below
    with torch.inference_mode():
        out, _ = tx.update([torch.ones(2), torch.ones(3)], tx.init(None))
    assert torch.equal(out[0], torch.full((2,), 0.25))
    g = [torch.ones(2, requires_grad=True), torch.ones(3, requires_grad=True)]
    out, _ = tx.update(g, tx.init(None), inplace=False)
    sum(o.sum() for o in out).backward()
    assert torch.equal(g[1].grad, torch.full((3,), 0.25))


def test_sgd_matches_per_leaf_math_to_second_order():
    torch.manual_seed(0)
    p = [torch.randn(4, 3, dtype=torch.float64, requires_grad=True),
         torch.randn(3, dtype=torch.float64, requires_grad=True)]
    tx = diffopt.sgd(0.3)

    def step(*params):
        g = torch.autograd.grad(sum((q ** 3).sum() for q in params), params, create_graph=True)
        updates, _ = tx.update(g, tx.init(params), inplace=False)
        return tuple(diffopt.apply_updates(params, updates, inplace=False))

    torch.autograd.gradcheck(step, tuple(p))
    torch.autograd.gradgradcheck(step, tuple(p))
    new = step(*p)
    for q, n in zip(p, new):
        # The same math up to the rounding of a different evaluation order.
        assert torch.allclose(n, q - 0.3 * 3 * q ** 2, rtol=0, atol=1e-13)


def test_one_member_chain_keeps_its_state_check():
    tx = diffopt.sgd(0.1)
    grads = [torch.ones(2)]
    updates, state = tx.update(grads, tx.init(grads))
    assert state == tx.init(grads) and torch.equal(updates[0], torch.full((2,), -0.1))
    for bad in ["state", (), ((), ())]:
        with pytest.raises(ValueError, match="expected a state with 1 entries"):
            tx.update(grads, bad)


def test_mixed_dtypes_and_none_take_the_per_leaf_path():
    tx = diffopt.scale(-0.1)
    out, _ = tx.update([torch.ones(2), torch.ones(2, dtype=torch.float64), None],
                       tx.init(None))
    assert out[0].dtype == torch.float32 and out[2] is None
    # The float64 leaf times the float64 factor, not a float32-rounded one.
    assert torch.equal(out[1], torch.full((2,), -0.1, dtype=torch.float64))


def test_pairs_fit():
    a = [torch.ones(2), torch.ones(3)]
    assert pairs_fit(a, [torch.ones(2), torch.ones(3)])
    assert not pairs_fit(a, [torch.ones(1), torch.ones(3)])  # broadcastable is not a pair
    assert not pairs_fit(a, [torch.ones(2), torch.ones(3, dtype=torch.float64)])
    assert not pairs_fit(a, [torch.ones(2), None])
    assert not pairs_fit([], [])
    seen = []

    def under_vmap(x):
        seen.append(pairs_fit([x], [x]))  # no batching rule for foreach ops: always no
        return x

    torch.func.vmap(under_vmap)(torch.ones(2, 1))
    assert seen == [False]


def test_scalar_tensor_made_inside_grad_or_jvp_is_not_kept():
    scalars = ScalarTensors(3.0)

    def f(x):
        return (x * scalars[torch.float32]).sum()

    assert torch.equal(torch.func.grad(f)(torch.ones(2)), torch.full((2,), 3.0))
    torch.func.jvp(f, (torch.ones(2),), (torch.ones(2),))
    assert torch.float32 not in scalars
    torch.func.vmap(f)(torch.ones(2, 2))  # vmap leaves a factory's tensor plain: kept
    assert torch.float32 in scalars and f(torch.ones(2)).item() == 6.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_scale_under_vmap_equals_per_sample(dtype):
    # Under vmap the per-leaf ops take the factor as a 0-d tensor of the leaf's dtype (float32,
    # float64) or as the number: bitwise the per-sample result either way.
    tx = diffopt.scale(-0.1)
    g = {"a": torch.randn(5, 3, dtype=torch.float64).to(dtype),
         "b": torch.randn(5, 1, dtype=torch.float64).to(dtype)}
    p = {"a": torch.randn(3, dtype=torch.float64).to(dtype),
         "b": torch.randn(1, dtype=torch.float64).to(dtype)}

    def step(grads):
        updates, _ = tx.update(grads, tx.init(None), inplace=False)
        return diffopt.apply_updates(p, updates, inplace=False)

    batched = torch.func.vmap(step)(g)
    for i in range(5):
        one = step({k: v[i] for k, v in g.items()})
        for k in p:
            assert torch.equal(batched[k][i], one[k])
            assert torch.equal(one[k], p[k] + g[k][i] * -0.1)
