"""ZeroOrderGradientModule: the same estimates as the functional zero_order, class options."""

import math

import pytest
import torch

from diffopt.diff.zero_order import zero_order
from diffopt.nn import ZeroOrderGradientModule

DTYPE = torch.float64
A = torch.tensor([[3.0, 1.0], [1.0, 2.0]], dtype=DTYPE)


class Quadratic(ZeroOrderGradientModule, method="forward", num_samples=400, sigma=0.5):
    def __init__(self):
        super().__init__()
        self.theta = torch.nn.Parameter(torch.tensor([1.0, -2.0], dtype=DTYPE))

    def forward(self, offset):
        return (0.5 * self.theta @ A @ self.theta).item() + offset  # not differentiable

    def sample(self, sample_shape=torch.Size()):  # noqa: B008
        return torch.randn(sample_shape, dtype=DTYPE)


def test_module_matches_functional_estimate():
    torch.manual_seed(0)
    net = Quadratic()
    value = net(10.0)
    assert value.item() == pytest.approx(0.5 * 7.0 + 10.0)  # theta^T A theta = 7
    value.backward()
    torch.manual_seed(0)
    theta = torch.tensor([1.0, -2.0], dtype=DTYPE, requires_grad=True)
    estimator = zero_order(
        lambda shape: torch.randn(shape, dtype=DTYPE), method="forward", num_samples=400, sigma=0.5
    )
    estimator(lambda t, offset: (0.5 * t @ A @ t).item() + offset)(theta, 10.0).backward()
    torch.testing.assert_close(net.theta.grad, theta.grad)
    true_gradient = A @ theta.detach()
    # Per-draw error variance V of forward differences, (g.e) e + sigma/2 (e^T A e) e, from 100k
    # draws; the 400-draw mean lies within 5 sqrt(V / 400) of the gradient (Chebyshev: p < 4%).
    eps = torch.randn(100_000, 2, generator=torch.Generator().manual_seed(1), dtype=DTYPE)
    draws = (eps @ true_gradient)[:, None] * eps + 0.25 * torch.einsum("ni,ij,nj->n", eps, A, eps)[
        :, None
    ] * eps
    variance = (draws - true_gradient).pow(2).sum(1).mean().item()
    assert torch.linalg.norm(net.theta.grad - true_gradient) < 5 * math.sqrt(variance / 400)


def test_options_are_inherited_and_validated():
    class Antithetic(Quadratic, method="antithetic"):
        pass

    assert Antithetic._zero_order_options == {
        "method": "antithetic",
        "num_samples": 400,
        "sigma": 0.5,
    }
    with pytest.raises(ValueError, match="sigma"):

        class BadSigma(ZeroOrderGradientModule, sigma=0.0):
            pass

    with pytest.raises(ValueError, match="num_samples"):

        class BadSamples(ZeroOrderGradientModule, num_samples=0):
            pass

    with pytest.raises(ValueError, match="method"):

        class BadMethod(ZeroOrderGradientModule, method="central"):
            pass


def test_missing_sample_and_non_scalar_forward():
    class NoSample(ZeroOrderGradientModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(2))

        def forward(self):
            return self.w.sum()

    with pytest.raises(TypeError, match="abstract"):  # sample() is abstract, as is forward()
        NoSample()

    class Vector(NoSample):
        def forward(self):
            return self.w * 2

        def sample(self, sample_shape):
            return torch.randn(sample_shape)

    with pytest.raises(ValueError, match="scalar"):
        Vector()()


def test_forward_is_abstract_and_enabling_twice_is_refused():
    from diffopt.diff.zero_order.nn.module import enable_zero_order_gradients

    class NoForward(ZeroOrderGradientModule):
        def sample(self, sample_shape):
            return torch.randn(sample_shape)

    with pytest.raises(TypeError, match="abstract"):
        NoForward()

    class Both(NoForward):
        def forward(self):
            return torch.zeros(())

    Both()  # complete: instantiable
    with pytest.raises(TypeError, match="already"):
        enable_zero_order_gradients(Both)
