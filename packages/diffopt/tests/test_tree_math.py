"""tree_math against direct per-leaf torch computations."""

import math

import pytest
import torch

from diffopt import tree_math as tm


def _trees():
    torch.manual_seed(0)
    a = {"w": torch.randn(3, 2, dtype=torch.float64), "b": (torch.randn(4, dtype=torch.float64),)}
    b = {"w": torch.randn(3, 2, dtype=torch.float64), "b": (torch.randn(4, dtype=torch.float64),)}
    return a, b


def test_binary_ops_match_leafwise_torch():
    a, b = _trees()
    cases = {
        tm.tree_add: torch.add, tm.tree_sub: torch.sub, tm.tree_mul: torch.mul,
        tm.tree_div: torch.div, tm.tree_max: torch.maximum,
    }
    for tree_fn, leaf_fn in cases.items():
        # one correctly rounded operation per element on either side: equal bit for bit
        out = tree_fn(a, b)
        assert torch.equal(out["w"], leaf_fn(a["w"], b["w"]))
        assert torch.equal(out["b"][0], leaf_fn(a["b"][0], b["b"][0]))


def test_scalar_ops():
    a, b = _trees()
    assert torch.allclose(tm.tree_add_scalar_mul(a, b, 0.3)["w"], a["w"] + 0.3 * b["w"])
    assert torch.allclose(tm.tree_sub_scalar_mul(a, b, 0.3)["w"], a["w"] - 0.3 * b["w"])
    assert torch.allclose(tm.tree_scalar_mul(-2.0, a)["b"][0], -2.0 * a["b"][0])
    assert torch.equal(tm.tree_neg(a)["w"], -a["w"])
    assert torch.equal(tm.tree_add(a, b, a)["w"], a["w"] + b["w"] + a["w"])  # the same order of adds
    assert torch.allclose(tm.tree_add(a, b, alpha=2.0)["w"], a["w"] + 2 * b["w"])


def test_tensor_scalar_is_differentiable():
    a, b = _trees()
    alpha = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    out = tm.tree_sum(tm.tree_add_scalar_mul(a, b, alpha))
    (grad,) = torch.autograd.grad(out, alpha)
    assert torch.allclose(grad, b["w"].sum() + b["b"][0].sum())


def test_reductions():
    a, b = _trees()
    flat_a = torch.cat([a["w"].reshape(-1), a["b"][0]])
    flat_b = torch.cat([b["w"].reshape(-1), b["b"][0]])
    assert torch.allclose(tm.tree_vdot_real(a, b), flat_a @ flat_b)
    assert torch.allclose(tm.tree_vdot(a, b), flat_a @ flat_b)
    assert torch.allclose(tm.tree_sum(a), flat_a.sum())
    assert torch.allclose(tm.tree_norm(a), flat_a.norm())
    assert torch.allclose(tm.tree_norm(a, 1.0), flat_a.norm(1))
    assert torch.allclose(tm.tree_norm(a, 3.0), flat_a.norm(3))
    assert torch.allclose(tm.tree_norm(a, math.inf), flat_a.abs().max())
    assert torch.allclose(tm.tree_l2_norm(a, squared=True), flat_a.square().sum())


def test_complex_vdot_real():
    x = [torch.tensor([1 + 2j, 3 - 1j])]
    y = [torch.tensor([2 - 1j, 1j])]
    expected = torch.vdot(x[0], y[0]).real
    assert torch.allclose(tm.tree_vdot_real(x, y), expected)


def test_like_constructors():
    a, _ = _trees()
    assert torch.equal(tm.tree_zeros_like(a)["w"], torch.zeros(3, 2, dtype=torch.float64))
    assert torch.equal(tm.tree_ones_like(a)["b"][0], torch.ones(4, dtype=torch.float64))
    assert torch.equal(tm.tree_full_like(a, 7.0)["w"], torch.full((3, 2), 7.0,
                                                                  dtype=torch.float64))
    assert tm.tree_zeros_like(a, requires_grad=True)["w"].requires_grad


def test_none_is_an_empty_subtree():
    a = {"x": torch.ones(2), "y": None}
    b = {"x": torch.ones(2), "y": None}
    assert tm.tree_add(a, b)["y"] is None
    assert torch.equal(tm.tree_vdot_real(a, b), torch.tensor(2.0))


def test_mismatched_trees_raise_named_error():
    with pytest.raises(ValueError, match=r"tree_add.*different structures"):
        tm.tree_add({"a": torch.ones(1)}, {"b": torch.ones(1)})
    with pytest.raises(ValueError, match="tree_vdot_real"):
        tm.tree_vdot_real([torch.ones(1)], [torch.ones(1), torch.ones(1)])


def test_norm_of_zero_has_finite_gradient():
    x = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(tm.tree_norm([x]), x)
    assert torch.equal(grad, torch.zeros(3, dtype=torch.float64))


def test_safe_sqrt_gradcheck_and_zero():
    x = torch.tensor([0.3, 2.0, 5.0], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(tm.safe_sqrt, (x,))
    assert torch.autograd.gradgradcheck(tm.safe_sqrt, (x,))
    z = torch.zeros(2, dtype=torch.float64, requires_grad=True)
    (g,) = torch.autograd.grad(tm.safe_sqrt(z).sum(), z, create_graph=True)
    assert torch.equal(g, torch.zeros(2, dtype=torch.float64))
