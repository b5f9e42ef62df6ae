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


@pytest.mark.parametrize("shape", [(1,), (2, 2), (1, 2)])
def test_broadcastable_shapes_raise_instead_of_broadcasting(shape):
    # Every leaf a float32 tensor: the one-pass check of the multi-tensor path must still refuse
    # updates that torch's foreach add would broadcast.
    p = (torch.ones(2), torch.ones(3))
    for inplace in (False, True):
        with pytest.raises(TypeError, match=r"update 0 has shape"):
            diffopt.apply_updates(p, (torch.ones(shape), torch.ones(3)), inplace=inplace)
    assert all(torch.equal(t, torch.ones(t.shape)) for t in p)


def test_dtype_mismatch_raises_instead_of_promoting():
    p = (torch.ones(2, dtype=torch.float64), torch.ones(2, dtype=torch.float64))
    with pytest.raises(TypeError, match=r"update 1 has dtype torch.float32"):
        diffopt.apply_updates(p, (torch.ones(2, dtype=torch.float64), torch.ones(2)),
                              inplace=False)


def test_non_tensor_update_names_the_leaf():
    with pytest.raises(TypeError, match=r"leaf 1 .* float update"):
        diffopt.apply_updates([torch.ones(1), torch.ones(1)], [torch.ones(1), 0.5], inplace=False)


def test_any_single_dtype_takes_the_multi_tensor_add():
    p = (torch.ones(3, dtype=torch.bfloat16), torch.zeros(2, dtype=torch.bfloat16))
    u = (torch.full((3,), 0.5, dtype=torch.bfloat16), torch.ones(2, dtype=torch.bfloat16))
    out = diffopt.apply_updates(p, u, inplace=False)
    assert [t.dtype for t in out] == [torch.bfloat16] * 2
    assert torch.equal(out[0], torch.full((3,), 1.5, dtype=torch.bfloat16))
    assert torch.equal(out[1], torch.ones(2, dtype=torch.bfloat16))


def test_same_results_under_vmap_as_per_task():
    params = {"w": torch.randn(3, dtype=torch.float64), "b": torch.randn(1, dtype=torch.float64)}
    updates = {"w": torch.randn(4, 3, dtype=torch.float64),
               "b": torch.randn(4, 1, dtype=torch.float64)}
    batched = torch.func.vmap(lambda u: diffopt.apply_updates(params, u, inplace=False))(updates)
    for k in params:
        assert torch.equal(batched[k], params[k] + updates[k])
