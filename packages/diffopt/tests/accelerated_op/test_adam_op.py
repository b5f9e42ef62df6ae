"""diffopt.accelerated_op.AdamOp (TorchOpt's calling convention) against a pure-torch Adam step."""

import pytest
import torch

from diffopt.accelerated_op import AdamOp, is_available

CONSTANTS = [dict(), dict(b1=0.8, b2=0.95, eps=1e-3, eps_root=1e-4)]


def reference(mu, nu, g, count, b1=0.9, b2=0.999, eps=1e-8, eps_root=0.0):
    mu = b1 * mu + (1 - b1) * g
    nu = b2 * nu + (1 - b2) * g * g
    direction = (mu / (1 - b1 ** count)) / (torch.sqrt(nu / (1 - b2 ** count) + eps_root) + eps)
    return mu, nu, direction


def _inputs(seed):
    torch.manual_seed(seed)
    kw = dict(dtype=torch.float64)
    return torch.randn(5, **kw), torch.rand(5, **kw), torch.randn(5, **kw)


@pytest.mark.parametrize("constants", CONSTANTS)
@pytest.mark.parametrize("inplace", [False, True])
def test_matches_reference(constants, inplace):
    mu, nu, g = _inputs(0)
    expected = reference(mu, nu, g, 3, **constants)
    inputs = mu.clone(), nu.clone(), g.clone()
    out = AdamOp(**constants, inplace=inplace)(*inputs, torch.tensor(3))
    for got, want in zip(out, expected):
        torch.testing.assert_close(got, want)
    if inplace:
        assert all(o is i for o, i in zip(out, inputs))
    else:
        torch.testing.assert_close(inputs[2], g)  # nothing overwritten


@pytest.mark.parametrize("constants", CONSTANTS)
def test_gradcheck(constants):
    mu, nu, g = (t.requires_grad_() for t in _inputs(1))
    op = AdamOp(**constants, inplace=False)
    assert torch.autograd.gradcheck(lambda m, v, u: op(m, v, u, 2), (mu, nu, g))


def test_gradient_is_finite_where_gradient_and_moment_are_zero():
    g = torch.tensor([0.0, 1.0], dtype=torch.float64, requires_grad=True)
    _, _, direction = AdamOp(inplace=False)(torch.zeros(2, dtype=torch.float64),
                                            torch.zeros(2, dtype=torch.float64), g, 1)
    (grad,) = torch.autograd.grad(direction.sum(), g)
    assert torch.isfinite(grad).all()
    # d = g / (|g| + eps) at step 1: derivative eps / (|g| + eps)^2, i.e. 1/eps at g = 0
    torch.testing.assert_close(grad, torch.tensor([1e8, 1e-8 / (1 + 1e-8) ** 2],
                                                  dtype=torch.float64))


def test_none_updates_pass_through():
    mu, nu = torch.ones(2), torch.ones(2)
    assert AdamOp()(mu, nu, None, 1) == (mu, nu, None)


def test_bad_arguments():
    with pytest.raises(ValueError, match="b1"):
        AdamOp(b1=1.0)
    with pytest.raises(ValueError, match="eps"):
        AdamOp(eps=-1.0)
    op = AdamOp()
    with pytest.raises(ValueError, match=">= 1"):
        op(torch.zeros(1), torch.zeros(1), torch.ones(1), 0)
    with pytest.raises(ValueError, match="shape"):
        op(torch.zeros(2), torch.zeros(1), torch.ones(1), 1)
    g = torch.ones(1, requires_grad=True)
    mu, nu = torch.zeros(1), torch.zeros(1)
    with pytest.raises(RuntimeError, match="inplace=False"):
        op(mu, nu, g, 1)
    assert torch.equal(mu, torch.zeros(1))  # untouched by the failed call


def test_is_available():
    assert is_available("cpu") and is_available(torch.device("cpu"))
    assert is_available(["cpu"])
    assert is_available("meta")  # fused-optim's shape-only kernels run on the meta device
    # Without devices: CUDA and the CPU together, so False wherever CUDA is missing.
    assert is_available() == torch.cuda.is_available() == is_available(["cpu", "cuda"])
    if not torch.cuda.is_available():
        assert not is_available("cuda") and not is_available(0)
