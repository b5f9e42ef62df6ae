"""diffopt.linalg.ns / ns_inv: convergence to the dense inverse, agreement with CG, divergence."""

import itertools
import warnings

import pytest
import torch

from diffopt import linalg
from diffopt.linalg import NeumannDivergenceWarning


def spd(n, seed, cond=10.0):
    # A random symmetric matrix with eigenvalues spread log-uniformly over [1, cond].
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    eigenvalues = torch.logspace(0, torch.log10(torch.tensor(cond)).item(), n, dtype=torch.float64)
    return q @ torch.diag(eigenvalues) @ q.T


def test_ns_converges_to_solution_and_agrees_with_cg():
    A = spd(10, 0, cond=5.0)  # eigenvalues in [1, 5]
    b = torch.randn(10, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    expected = torch.linalg.solve(A, b)
    x_ns = linalg.ns(lambda v: A @ v, b, maxiter=400, alpha=0.3)  # rho(I - 0.3 A) = 0.7
    x_cg = linalg.cg(lambda v: A @ v, b, rtol=1e-12)
    torch.testing.assert_close(x_ns, expected, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(x_ns, x_cg, rtol=1e-9, atol=1e-10)


def test_ns_error_shrinks_geometrically():
    A = spd(6, 2, cond=4.0)
    b = torch.ones(6, dtype=torch.float64)
    expected = torch.linalg.solve(A, b)
    errors = [torch.linalg.norm(linalg.ns(A, b, k, alpha=0.4) - expected) for k in (5, 10, 20, 40)]
    assert all(later < earlier for earlier, later in itertools.pairwise(errors))
    # rho(I - 0.4 A) = 0.6, so the tail after k terms is at most
    # alpha * sum_{j > k} 0.6^j ||b|| = 0.4 * 0.6^(k+1) / (1 - 0.6) ||b|| = 0.6^(k+1) ||b||.
    assert errors[-1] <= 0.6**41 * torch.linalg.norm(b) * (1 + 1e-9)


def test_ns_alpha_scaling_gives_the_solution_not_a_multiple():
    # TorchOpt's ns returns A^{-1} b / alpha for alpha != 1; ours returns A^{-1} b.
    A = torch.diag(torch.tensor([2.0, 4.0], dtype=torch.float64))
    b = torch.tensor([2.0, 4.0], dtype=torch.float64)
    torch.testing.assert_close(linalg.ns(A, b, 200, alpha=0.25), torch.ones(2, dtype=torch.float64))


def test_ns_on_pytrees():
    A = {"w": spd(3, 3, cond=2.0), "b": spd(2, 4, cond=2.0)}
    b = {"w": torch.ones(3, dtype=torch.float64), "b": torch.ones(2, dtype=torch.float64)}
    x = linalg.ns(A, b, maxiter=200, alpha=0.5)
    torch.testing.assert_close(x["w"], torch.linalg.solve(A["w"], b["w"]))
    torch.testing.assert_close(x["b"], torch.linalg.solve(A["b"], b["b"]))


def test_ns_diverging_warns_then_raises():
    A = spd(4, 5, cond=4.0)  # lambda_max = 4: alpha must be < 0.5
    b = torch.ones(4, dtype=torch.float64)
    with pytest.warns(NeumannDivergenceWarning, match="not converging"):
        linalg.ns(A, b, maxiter=20, alpha=1.0)
    with pytest.raises(FloatingPointError, match="diverged"):
        linalg.ns(A, b, maxiter=5000, alpha=1.0)


def test_ns_converging_does_not_warn():
    A = spd(4, 5, cond=4.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        linalg.ns(A, torch.ones(4, dtype=torch.float64), maxiter=50, alpha=0.2)


def test_ns_inv_matches_inverse_on_pytree():
    A = {"a": spd(4, 6, cond=3.0), "b": spd(2, 7, cond=2.0)}
    inverse = linalg.ns_inv(A, maxiter=300, alpha=0.4)
    torch.testing.assert_close(inverse["a"], torch.linalg.inv(A["a"]))
    torch.testing.assert_close(inverse["b"], torch.linalg.inv(A["b"]))


def test_ns_inv_diverging_and_bad_input():
    with pytest.warns(NeumannDivergenceWarning):
        linalg.ns_inv(4.0 * torch.eye(2, dtype=torch.float64), maxiter=10)
    with pytest.raises(ValueError, match="square"):
        linalg.ns_inv(torch.ones(2, 3))
    with pytest.raises(ValueError, match="alpha"):
        linalg.ns_inv(torch.eye(2), alpha=0.0)
    with pytest.raises(ValueError, match="alpha"):
        linalg.ns(torch.eye(2), torch.ones(2), alpha=-1.0)
    with pytest.raises(ValueError, match="maxiter"):
        linalg.ns(torch.eye(2), torch.ones(2), maxiter=-1)


def test_ns_inv_of_a_matrix_free_operator_is_an_operator():
    A = {"w": spd(3, 8, cond=2.0), "b": spd(2, 9, cond=2.0)}
    inverse = linalg.ns_inv(lambda x: {k: A[k] @ x[k] for k in x}, maxiter=200, alpha=0.5)
    b = {"w": torch.ones(3, dtype=torch.float64), "b": torch.ones(2, dtype=torch.float64)}
    x = inverse(b)
    torch.testing.assert_close(x["w"], torch.linalg.solve(A["w"], b["w"]))
    torch.testing.assert_close(x["b"], torch.linalg.solve(A["b"], b["b"]))


def test_uniform_and_mixed_dtype_trees_sum_the_same_series():
    # A uniform tree is summed as one flat vector, a mixed-dtype one leaf by leaf.
    A = {"a": torch.tensor([[1.0, 0.2], [0.2, 0.8]], dtype=torch.float64),
         "b": torch.tensor([[0.9]], dtype=torch.float64)}
    b = {"a": torch.tensor([1.0, -2.0], dtype=torch.float64), "b": torch.tensor([3.0])}
    uniform = linalg.ns(A, {"a": b["a"], "b": b["b"].double()}, 60, alpha=0.8)
    mixed = linalg.ns({"a": A["a"], "b": A["b"].float()}, b, 60, alpha=0.8)
    assert mixed["b"].dtype == torch.float32
    torch.testing.assert_close(mixed["a"], uniform["a"])
    torch.testing.assert_close(mixed["b"], uniform["b"].float())
    torch.testing.assert_close(uniform["a"], torch.linalg.solve(A["a"], b["a"]))
    torch.testing.assert_close(uniform["b"], torch.tensor([3.0 / 0.9], dtype=torch.float64))
