"""diffopt.fixed_point.solve: each method against closed-form fixed points, on pytrees, and its
report of non-convergence (warn / raise / ignore) and of bad input."""

import math
import warnings

import pytest
import torch

from diffopt import fixed_point
from diffopt.fixed_point import FixedPointError, FixedPointWarning

DTYPE = torch.float64
METHODS = list(fixed_point.METHODS)


def symmetric_contraction(n, seed, low, high):
    """A symmetric W with eigenvalues evenly spread over [low, high]."""
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=DTYPE))
    return q @ torch.diag(torch.linspace(low, high, n, dtype=DTYPE)) @ q.T


@pytest.mark.parametrize("method", METHODS)
def test_linear_fixed_point_equals_the_closed_form(method):
    n = 20
    W = symmetric_contraction(n, 0, -0.5, 0.8)
    b = torch.linspace(-1, 1, n, dtype=DTYPE)
    result = fixed_point.solve(lambda z, b: W @ z + b, torch.zeros(n, dtype=DTYPE), b,
                               method=method, tol=1e-12, max_iter=500)
    expected = torch.linalg.solve(torch.eye(n, dtype=DTYPE) - W, b)
    assert result.converged
    torch.testing.assert_close(result.value, expected, rtol=0, atol=1e-10)
    # The reported residual is that of the returned value.
    assert result.residual <= 1e-12
    assert math.isclose(result.residual, float((W @ result.value + b - result.value).norm()),
                        rel_tol=1e-6, abs_tol=1e-16)


@pytest.mark.parametrize("method", METHODS)
def test_the_dottie_number(method):
    result = fixed_point.solve(torch.cos, torch.tensor(1.0, dtype=DTYPE), method=method,
                               tol=1e-13)
    assert result.converged
    # cos(z) = z has one real root, 0.7390851332151607 (to double precision).
    assert abs(float(result.value) - 0.7390851332151607) < 1e-12


def test_acceleration_beats_plain_iteration_on_a_slow_contraction():
    n = 60
    W = symmetric_contraction(n, 1, 0.0, 0.99)  # plain iteration shrinks errors by 0.99 a step
    b = torch.ones(n, dtype=DTYPE)
    z0 = torch.zeros(n, dtype=DTYPE)
    expected = torch.linalg.solve(torch.eye(n, dtype=DTYPE) - W, b)
    plain = fixed_point.solve(lambda z: W @ z + b, z0, method="iteration", tol=1e-9,
                              max_iter=300, on_failure="ignore")
    assert not plain.converged
    for method, options in [("anderson", {}), ("anderson", {"memory": 20}),
                            ("broyden", {}), ("broyden", {"memory": 10})]:
        result = fixed_point.solve(lambda z: W @ z + b, z0, method=method, tol=1e-9,
                                   max_iter=300, **options)
        assert result.converged and result.iterations < 300, (method, options)
        torch.testing.assert_close(result.value, expected, rtol=0, atol=1e-7)


@pytest.mark.parametrize("method", ["anderson", "broyden"])
def test_secant_methods_find_a_repulsive_fixed_point(method):
    # z = 2 z - 1 has the fixed point 1, which plain iteration runs away from.
    result = fixed_point.solve(lambda z: 2 * z - 1, torch.tensor([0.0], dtype=DTYPE),
                               method=method, tol=1e-12)
    assert result.converged
    torch.testing.assert_close(result.value, torch.tensor([1.0], dtype=DTYPE))
    with pytest.warns(FixedPointWarning, match="non-finite"):
        diverged = fixed_point.solve(lambda z: 2 * z - 1, torch.tensor([0.0], dtype=DTYPE),
                                     method="iteration", max_iter=5000)
    assert not diverged.converged


@pytest.mark.parametrize("method", METHODS)
def test_pytree_of_mixed_dtypes_and_extra_arguments(method):
    # z = {'u': (2, 2), 'v': (3,)} coupled through a contraction, float32 and float64 leaves.
    W = symmetric_contraction(7, 2, -0.3, 0.6)
    c = torch.arange(7, dtype=DTYPE) / 7

    def f(z, c, scale):
        flat = torch.cat([z["u"].reshape(-1).double(), z["v"]])
        out = scale * (W @ flat) + c
        return {"u": out[:4].reshape(2, 2).float(), "v": out[4:]}

    z0 = {"u": torch.zeros(2, 2), "v": torch.zeros(3, dtype=DTYPE)}
    result = fixed_point.solve(f, z0, c, 1.0, method=method, tol=1e-6)
    assert result.converged
    assert result.value["u"].dtype == torch.float32 and result.value["v"].dtype == DTYPE
    expected = torch.linalg.solve(torch.eye(7, dtype=DTYPE) - W, c)
    torch.testing.assert_close(result.value["v"], expected[4:], rtol=0, atol=1e-5)
    torch.testing.assert_close(result.value["u"].reshape(-1).double(), expected[:4], rtol=0,
                               atol=1e-5)


@pytest.mark.parametrize(("options", "converges"), [
    ({"memory": 1}, True), ({"beta": 0.5}, True), ({"regularization": 1e-4}, True),
    ({"regularization": 0.0}, True),
])
def test_anderson_options(options, converges):
    W = symmetric_contraction(10, 3, -0.9, 0.9)
    b = torch.ones(10, dtype=DTYPE)
    result = fixed_point.solve(lambda z: W @ z + b, torch.zeros(10, dtype=DTYPE), tol=1e-10,
                               max_iter=400, **options)
    assert result.converged is converges
    expected = torch.linalg.solve(torch.eye(10, dtype=DTYPE) - W, b)
    torch.testing.assert_close(result.value, expected, rtol=0, atol=1e-8)


def test_relative_tolerance():
    result = fixed_point.solve(lambda z: z / 2 + 1000.0, torch.tensor([0.0], dtype=DTYPE),
                               method="iteration", tol=0.0, rtol=1e-3)
    # Converged once |f(z) - z| <= 1e-3 |f(z)|, near z = 2000.
    assert result.converged and result.residual <= 1e-3 * 2000.0
    assert result.residual > 1e-3 * 2000.0 / 4  # and not many steps later


def test_runs_without_building_a_graph():
    a = torch.tensor(0.5, dtype=DTYPE, requires_grad=True)
    result = fixed_point.solve(lambda z, a: a * z + 1, torch.tensor(0.0, dtype=DTYPE), a,
                               tol=1e-10)
    assert not result.value.requires_grad
    assert abs(float(result.value) - 2.0) < 1e-9


def test_non_convergence_warns_raises_or_is_only_reported():
    def f(z):
        return 0.9 * z + 1

    z0 = torch.tensor([0.0], dtype=DTYPE)
    with pytest.warns(FixedPointWarning, match="did not converge.*max_iter=3"):
        result = fixed_point.solve(f, z0, method="iteration", max_iter=3)
    assert (result.converged, result.iterations) == (False, 3)
    assert issubclass(FixedPointWarning, RuntimeWarning)
    with pytest.raises(FixedPointError, match="did not converge") as info:
        fixed_point.solve(f, z0, method="iteration", max_iter=3, on_failure="raise")
    assert info.value.result.iterations == 3 and not info.value.result.converged
    torch.testing.assert_close(info.value.result.value, result.value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ignored = fixed_point.solve(f, z0, method="iteration", max_iter=3, on_failure="ignore")
    assert not ignored.converged
    # max_iter=0 only measures the starting point.
    start = fixed_point.solve(f, z0, max_iter=0, on_failure="ignore")
    assert (start.iterations, start.residual) == (0, 1.0)


def test_bad_input_is_named():
    z0 = torch.zeros(2)
    with pytest.raises(TypeError, match="fn must be callable"):
        fixed_point.solve("f", z0)
    with pytest.raises(TypeError, match="real floating-point"):
        fixed_point.solve(lambda z: z, torch.zeros(2, dtype=torch.int64))
    with pytest.raises(TypeError, match="tensor"):
        fixed_point.solve(lambda z: z, [1.0, 2.0])
    with pytest.raises(ValueError, match="empty"):
        fixed_point.solve(lambda z: z, {})
    with pytest.raises(ValueError, match="method must be one of"):
        fixed_point.solve(lambda z: z, z0, method="newton")
    with pytest.raises(TypeError, match="takes no beta"):
        fixed_point.solve(lambda z: z, z0, method="broyden", beta=0.5)
    with pytest.raises(TypeError, match="takes no memory"):
        fixed_point.solve(lambda z: z, z0, method="iteration", memory=3)
    with pytest.raises(ValueError, match="tol"):
        fixed_point.solve(lambda z: z, z0, tol=-1.0)
    with pytest.raises(ValueError, match="max_iter"):
        fixed_point.solve(lambda z: z, z0, max_iter=1.5)
    with pytest.raises(ValueError, match="memory"):
        fixed_point.solve(lambda z: z, z0, memory=0)
    with pytest.raises(ValueError, match="beta"):
        fixed_point.solve(lambda z: z, z0, beta=0.0)
    with pytest.raises(ValueError, match="on_failure"):
        fixed_point.solve(lambda z: z, z0, on_failure="silent")
    with pytest.raises(ValueError, match="shaped like z0"):
        fixed_point.solve(lambda z: z[:1], z0)
    with pytest.raises(ValueError, match="structure of z0"):
        fixed_point.solve(lambda z: (z, z), z0)
