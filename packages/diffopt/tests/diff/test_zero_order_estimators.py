"""zero_order: exact estimator formulas, convergence on quadratics, non-differentiable losses."""

import math

import pytest
import torch

from diffopt.diff import zero_order as zero_order_module
from diffopt.diff.zero_order import zero_order

DTYPE = torch.float64
G = torch.Generator().manual_seed(0)
A = torch.randn(4, 4, generator=G, dtype=DTYPE)
A = A @ A.T / 4 + torch.eye(4, dtype=DTYPE)
B = torch.randn(4, generator=G, dtype=DTYPE)
OFFSET = 5.0  # a large f(theta) is what makes the naive estimator noisy
THETA = torch.tensor([0.5, -1.0, 0.25, 1.5], dtype=DTYPE)
TRUE_GRADIENT = A @ THETA + B  # Gaussian smoothing leaves a quadratic's gradient unchanged


def quadratic(theta):
    return 0.5 * theta @ A @ theta + B @ theta + OFFSET


def normal(shape):
    return torch.randn(shape, dtype=DTYPE)


def estimate(method, num_samples, sigma, seed, fn=quadratic, distribution=normal):
    torch.manual_seed(seed)
    theta = THETA.clone().requires_grad_()
    zero_order(distribution, method=method, num_samples=num_samples, sigma=sigma)(fn)(
        theta
    ).backward()
    return theta.grad


def per_sample_estimates(method, sigma, noise):
    # The estimators written out in closed form, vectorized over the rows of `noise`.
    def f(thetas):
        return 0.5 * torch.einsum("ni,ij,nj->n", thetas, A, thetas) + thetas @ B + OFFSET

    plus = f(THETA + sigma * noise)
    if method == "naive":
        weight = plus
    elif method == "forward":
        weight = plus - quadratic(THETA)
    else:
        weight = 0.5 * (plus - f(THETA - sigma * noise))
    return weight[:, None] * noise / sigma


@pytest.mark.parametrize("method", ["naive", "forward", "antithetic"])
def test_estimate_is_exactly_the_estimator_formula(method):
    noise = torch.randn(7, 4, generator=torch.Generator().manual_seed(1), dtype=DTYPE)
    draws = iter(noise)
    grad = estimate(method, 7, 0.3, 0, distribution=lambda shape: next(draws))
    expected = per_sample_estimates(method, 0.3, noise).mean(0)
    torch.testing.assert_close(grad, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("method", ["naive", "forward", "antithetic"])
def test_estimate_converges_to_the_true_gradient(method):
    sigma = 0.5
    # Per-sample error variance V = E||g_i - grad||^2, from 200k draws of the closed form.
    reference_noise = torch.randn(
        200_000, 4, generator=torch.Generator().manual_seed(2), dtype=DTYPE
    )
    per_sample = per_sample_estimates(method, sigma, reference_noise)
    variance = (per_sample - TRUE_GRADIENT).pow(2).sum(1).mean().item()
    # The closed form itself is unbiased (within 5 standard errors of its 200k-draw mean).
    bias = torch.linalg.norm(per_sample.mean(0) - TRUE_GRADIENT).item()
    assert bias <= 5 * math.sqrt(variance / len(reference_noise))
    errors = []
    for num_samples in (100, 1000, 10000):
        grad = estimate(method, num_samples, sigma, seed=num_samples)
        error = torch.linalg.norm(grad - TRUE_GRADIENT).item()
        # E||mean - grad||^2 = V / N; Chebyshev: P(error > 4 sqrt(V / N)) <= 1/16.
        assert error <= 4 * math.sqrt(variance / num_samples), (num_samples, error, variance)
        errors.append(error)
    assert errors[-1] < errors[0]


def test_forward_and_antithetic_have_less_variance_than_naive():
    noise = torch.randn(100_000, 4, generator=torch.Generator().manual_seed(3), dtype=DTYPE)
    variance = {
        m: (per_sample_estimates(m, 0.5, noise) - TRUE_GRADIENT).pow(2).sum(1).mean()
        for m in ("naive", "forward", "antithetic")
    }
    assert variance["antithetic"] < variance["forward"] < variance["naive"]


def test_non_differentiable_objectives():
    def with_item(theta):  # the quadratic, through a Python float
        return quadratic(theta).item()

    grad = estimate("antithetic", 4000, 0.5, 4, fn=with_item)
    assert torch.linalg.norm(grad - TRUE_GRADIENT) < 0.1 * torch.linalg.norm(TRUE_GRADIENT)

    def staircase(theta):  # piecewise constant; its smoothing's slope is 1 per coordinate
        return torch.round(20 * theta).sum() / 20

    torch.manual_seed(5)
    theta = torch.tensor([0.31, -0.72, 1.13], dtype=DTYPE, requires_grad=True)
    zero_order(normal, method="antithetic", num_samples=4000, sigma=0.3)(staircase)(
        theta
    ).backward()
    # Per draw, coordinate i gets about eps_i * sum_j eps_j (+ rounding noise): variance about
    # 3 (+ < 1), so the mean of 4000 draws is within 5 standard deviations of 1 when
    # |error| <= 5 sqrt(4 / 4000) = 0.16.
    torch.testing.assert_close(theta.grad, torch.ones(3, dtype=DTYPE), rtol=0, atol=0.16)


def test_pytree_arguments_keywords_and_several_argnums():
    def objective(params, data, scales, *, power):
        return (params["w"] * data).sum() + params["b"] ** power + (scales[0] * scales[1]).sum()

    # Six perturbed elements (b, w, scales[0]); scales[1] does not require grad. Draw k is
    # sqrt(6) e_k, so the draws' second moment is exactly I, and antithetic differences are exact
    # for this (at most quadratic) objective: the estimate must be the exact gradient.
    chunks = []

    def coordinate_design(shape):
        if not chunks:
            k = len(calls)
            calls.append(k)
            chunks.extend(torch.split(math.sqrt(6) * torch.eye(6, dtype=DTYPE)[k], 1))
        numel = math.prod(shape)
        piece = torch.cat([chunks.pop(0) for _ in range(numel)])
        return piece.reshape(shape)

    calls = []
    params = {
        "w": torch.ones(3, dtype=DTYPE, requires_grad=True),
        "b": torch.tensor(2.0, dtype=DTYPE, requires_grad=True),
    }
    scales = (torch.ones(2, dtype=DTYPE, requires_grad=True), torch.full((2,), 3.0, dtype=DTYPE))
    data = torch.tensor([1.0, 2.0, 3.0], dtype=DTYPE)
    estimator = zero_order(
        coordinate_design, method="antithetic", argnums=(0, 2), num_samples=6, sigma=0.1
    )
    value = estimator(objective)(params, data, scales, power=2)
    assert value.shape == () and value.item() == pytest.approx(6 + 4 + 6)
    value.backward()
    assert len(calls) == 6 and not chunks
    torch.testing.assert_close(params["w"].grad, data)
    torch.testing.assert_close(params["b"].grad, torch.tensor(4.0, dtype=DTYPE))
    torch.testing.assert_close(scales[0].grad, scales[1])
    assert scales[1].grad is None


def test_upstream_gradient_scales_the_estimate():
    def run(scale):
        torch.manual_seed(7)
        theta = THETA.clone().requires_grad_()
        (
            scale * zero_order(normal, "forward", num_samples=50, sigma=0.2)(quadratic)(theta)
        ).backward()
        return theta.grad

    torch.testing.assert_close(run(3.0), 3.0 * run(1.0))


def test_distribution_kinds():
    class Rademacher:  # zero mean, unit variance, with a sample() method
        def sample(self, sample_shape):
            return torch.randint(0, 2, sample_shape).to(DTYPE) * 2 - 1

    for distribution in (torch.distributions.Normal(0.0, 1.0), Rademacher(), normal):
        grad = estimate("antithetic", 3000, 0.5, 8, distribution=distribution)
        assert torch.linalg.norm(grad - TRUE_GRADIENT) < 0.15 * torch.linalg.norm(TRUE_GRADIENT)
    batched = torch.distributions.Normal(torch.zeros(3), torch.ones(3))
    with pytest.raises(ValueError, match="one draw per element"):
        estimate("naive", 1, 0.5, 0, distribution=batched)


def test_module_is_callable_like_torchopt():
    torch.manual_seed(9)
    theta = THETA.clone().requires_grad_()
    zero_order_module(normal, method="antithetic", num_samples=10, sigma=0.1)(quadratic)(
        theta
    ).backward()
    assert theta.grad.shape == (4,)


def test_no_estimate_without_grad():
    calls = []

    def counted(theta):
        calls.append(1)
        return quadratic(theta)

    value = zero_order(normal, num_samples=100)(counted)(THETA)  # THETA does not require grad
    assert not value.requires_grad and len(calls) == 1


def test_bad_input():
    with pytest.raises(ValueError, match="method"):
        zero_order(normal, method="central")
    with pytest.raises(ValueError, match="num_samples"):
        zero_order(normal, num_samples=0)
    with pytest.raises(ValueError, match="sigma"):
        zero_order(normal, sigma=0.0)
    with pytest.raises(ValueError, match="sigma"):
        zero_order(normal, sigma=-1.0)
    with pytest.raises(TypeError, match="distribution"):
        zero_order("gaussian")
    theta = THETA.clone().requires_grad_()
    with pytest.raises(ValueError, match="scalar"):
        zero_order(normal)(lambda t: t * 2)(theta)
    with pytest.raises(TypeError, match="scalar"):
        zero_order(normal)(lambda t: "loss")(theta)
    with pytest.raises(ValueError, match="out of range"):
        zero_order(normal, argnums=2)(quadratic)(theta)
    with pytest.raises(TypeError, match="floating-point"):
        zero_order(normal)(lambda n: torch.tensor(1.0))(3)


def test_non_tensor_leaves_ride_along():
    def objective(params):
        assert params["name"] == "p" and params["frozen"].dtype == torch.int64
        return quadratic(params["theta"]) * params["weight"]

    torch.manual_seed(10)
    theta = THETA.clone().requires_grad_()
    params = {"theta": theta, "name": "p", "weight": 2.0, "frozen": torch.tensor([1, 2])}
    zero_order(normal, method="antithetic", num_samples=2000, sigma=0.5)(objective)(
        params
    ).backward()
    # Antithetic differences of a quadratic are exact, so a draw's error is (e e^T - I) g, whose
    # squared norm averages (d + 1) ||g||^2: 3 standard errors for 2000 draws is 0.15 ||g||.
    error = torch.linalg.norm(theta.grad - 2.0 * TRUE_GRADIENT)
    assert error < 3 * math.sqrt(5 / 2000) * torch.linalg.norm(2.0 * TRUE_GRADIENT)
