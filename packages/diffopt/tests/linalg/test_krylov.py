"""linalg.gmres and linalg.bicgstab against dense float64 solves: pytrees, preconditioning,
complex systems, gradients through the iterations, and their stopping rule."""

import pytest
import torch

from diffopt import linalg

DTYPE = torch.float64
SOLVERS = [linalg.gmres, linalg.bicgstab]


def non_symmetric(n, seed, shift=2.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, n, generator=g, dtype=DTYPE) / n**0.5 + shift * torch.eye(n, dtype=DTYPE)


@pytest.mark.parametrize("solver", SOLVERS)
def test_uniform_and_mixed_dtype_pytrees_match_dense_solve(solver):
    A = non_symmetric(12, 0)
    expected = torch.linalg.solve(A, torch.arange(12, dtype=DTYPE))

    def matvec(tree):  # a coupled operator on a {'w': (2, 4), 'b': (4,)} tree
        out = A @ torch.cat([tree["w"].reshape(-1).to(DTYPE), tree["b"].to(DTYPE)])
        return {"w": out[:8].reshape(2, 4).to(tree["w"].dtype), "b": out[8:].to(tree["b"].dtype)}

    b = {"w": torch.arange(8, dtype=DTYPE).reshape(2, 4), "b": torch.arange(8.0, 12.0, dtype=DTYPE)}
    x = solver(matvec, b, rtol=1e-12)
    torch.testing.assert_close(torch.cat([x["w"].reshape(-1), x["b"]]), expected)
    # Leaves of two dtypes are iterated leaf by leaf; the float32 leaf limits the accuracy.
    mixed = {"w": b["w"], "b": b["b"].float()}
    x = solver(matvec, mixed, rtol=1e-6)
    assert x["b"].dtype == torch.float32
    torch.testing.assert_close(x["w"].reshape(-1), expected[:8], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("solver", SOLVERS)
def test_x0_and_right_preconditioner(solver):
    n = 40
    scales = torch.logspace(0, 3, n, dtype=DTYPE)
    A = scales[:, None] * non_symmetric(n, 1)  # badly scaled rows
    b = torch.ones(n, dtype=DTYPE)
    expected = torch.linalg.solve(A, b)
    jacobi = torch.diag(1.0 / torch.diagonal(A))
    x = solver(A, b, rtol=1e-12, M=jacobi)
    torch.testing.assert_close(x, expected)
    # Starting at the solution, zero iterations already give it.
    torch.testing.assert_close(solver(A, b, x0=expected, maxiter=0), expected)


@pytest.mark.parametrize("solver", SOLVERS)
def test_complex_system(solver):
    g = torch.Generator().manual_seed(2)
    A = torch.randn(6, 6, generator=g, dtype=torch.complex128) + 4 * torch.eye(6, dtype=torch.complex128)
    b = torch.randn(6, generator=g, dtype=torch.complex128)
    torch.testing.assert_close(solver(A, b, rtol=1e-12), torch.linalg.solve(A, b))


@pytest.mark.parametrize("solver", SOLVERS)
def test_gradient_flows_through_iterations(solver):
    # x = A^{-1} b: d(sum x)/db = A^{-T} 1 and d(sum x)/dA = -(A^{-T} 1) x^T.
    A = non_symmetric(8, 3).requires_grad_()
    b = torch.linspace(-1, 1, 8, dtype=DTYPE).requires_grad_()
    x = solver(lambda v: A @ v, b, rtol=1e-13)
    grad_A, grad_b = torch.autograd.grad(x.sum(), (A, b))
    u = torch.linalg.solve(A.detach().T, torch.ones(8, dtype=DTYPE))
    torch.testing.assert_close(grad_b, u)
    torch.testing.assert_close(grad_A, -torch.outer(u, x.detach()))


@pytest.mark.parametrize("solver", SOLVERS)
def test_stops_at_the_requested_tolerance(solver):
    A = non_symmetric(60, 4, shift=1.0)
    b = torch.ones(60, dtype=DTYPE)
    for rtol in (1e-2, 1e-6, 1e-10):
        x = solver(A, b, rtol=rtol)
        assert float((A @ x - b).norm()) <= rtol * float(b.norm())
    loose = solver(A, b, rtol=1e-2)
    assert float((A @ loose - b).norm()) > 1e-8 * float(b.norm())  # it did stop early
    x = solver(A, b, rtol=0.0, atol=1e-9)
    assert float((A @ x - b).norm()) <= 1e-9


def test_gmres_restart_bounds_the_basis_and_still_converges():
    A = non_symmetric(50, 5)
    b = torch.ones(50, dtype=DTYPE)
    for restart in (1, 4, 50):
        x = linalg.gmres(A, b, rtol=1e-11, restart=restart)
        torch.testing.assert_close(x, torch.linalg.solve(A, b))


@pytest.mark.parametrize("solver", SOLVERS)
def test_bad_arguments_and_non_finite_values(solver):
    with pytest.raises(ValueError, match="rtol"):
        solver(torch.eye(2), torch.ones(2), rtol=-1.0)
    with pytest.raises(ValueError, match="x0"):
        solver(torch.eye(2), torch.ones(2), x0=torch.zeros(3))
    with pytest.raises(TypeError, match="floating"):
        solver(torch.eye(2), torch.ones(2, dtype=torch.int64))
    with pytest.raises(ValueError, match="square"):
        solver(torch.ones(2, 3), torch.ones(3))
    with pytest.raises(FloatingPointError):
        solver(lambda v: v * float("nan"), torch.ones(3))


def test_a_bicgstab_breakdown_is_reported_and_gmres_solves_the_same_system():
    # A rotation: (r, A r) = 0 for every r, so BiCGSTAB cannot take its first step.
    A = torch.tensor([[0.0, 1.0], [-1.0, 0.0]], dtype=DTYPE)
    b = torch.tensor([1.0, 2.0], dtype=DTYPE)
    with pytest.warns(linalg.ConvergenceWarning, match="bicgstab did not converge"):
        linalg.bicgstab(A, b)
    torch.testing.assert_close(A @ linalg.gmres(A, b, rtol=1e-12), b)
