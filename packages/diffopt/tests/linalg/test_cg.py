"""diffopt.linalg.cg against dense float64 solves, on tensors, pytrees and matrix-free operators."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from diffopt import linalg


def spd(n, seed, cond=10.0):
    g = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    eigenvalues = torch.logspace(0, torch.log10(torch.tensor(cond)).item(), n, dtype=torch.float64)
    return q @ torch.diag(eigenvalues) @ q.T


def test_matches_dense_solve_callable_and_matrix():
    A = spd(12, 0)
    b = torch.randn(12, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    expected = torch.linalg.solve(A, b)
    x_callable = linalg.cg(lambda v: A @ v, b, rtol=1e-12)
    x_matrix = linalg.cg(A, b, rtol=1e-12)
    torch.testing.assert_close(x_callable, expected, rtol=1e-9, atol=1e-10)
    torch.testing.assert_close(x_matrix, expected, rtol=1e-9, atol=1e-10)


def test_pytree_with_coupled_matrix_free_operator():
    # One SPD matrix acting on a dict {'w': (2, 3), 'b': (2,)} through a flatten/unflatten.
    A = spd(8, 2, cond=50.0)

    def matvec(tree):
        flat = torch.cat([tree["w"].reshape(-1), tree["b"]])
        out = A @ flat
        return {"w": out[:6].reshape(2, 3), "b": out[6:]}

    g = torch.Generator().manual_seed(3)
    b = {
        "w": torch.randn(2, 3, generator=g, dtype=torch.float64),
        "b": torch.randn(2, generator=g, dtype=torch.float64),
    }
    x = linalg.cg(matvec, b, rtol=1e-12)
    expected = torch.linalg.solve(A, torch.cat([b["w"].reshape(-1), b["b"]]))
    torch.testing.assert_close(torch.cat([x["w"].reshape(-1), x["b"]]), expected)


def test_block_diagonal_pytree_of_matrices_and_x0():
    A = {"a": spd(4, 4), "b": spd(3, 5)}
    b = {"a": torch.ones(4, dtype=torch.float64), "b": torch.arange(3.0, dtype=torch.float64)}
    x0 = {"a": torch.full((4,), 0.3, dtype=torch.float64), "b": torch.zeros(3, dtype=torch.float64)}
    x = linalg.cg(A, b, x0=x0, rtol=1e-12)
    torch.testing.assert_close(x["a"], torch.linalg.solve(A["a"], b["a"]))
    torch.testing.assert_close(x["b"], torch.linalg.solve(A["b"], b["b"]))


def test_stops_at_the_requested_tolerance():
    A = spd(30, 6, cond=1e3)
    b = torch.randn(30, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    for rtol in (1e-2, 1e-6):
        x = linalg.cg(A, b, rtol=rtol)
        assert torch.linalg.norm(b - A @ x) <= rtol * torch.linalg.norm(b)
    loose = linalg.cg(A, b, rtol=1e-2)
    assert torch.linalg.norm(b - A @ loose) > 1e-6 * torch.linalg.norm(b)  # it did stop early


def test_maxiter_and_jacobi_preconditioner():
    diagonal = torch.logspace(0, 4, 20, dtype=torch.float64)
    A = torch.diag(diagonal)
    b = torch.ones(20, dtype=torch.float64)
    unpreconditioned = linalg.cg(A, b, maxiter=3)
    assert not torch.allclose(unpreconditioned, b / diagonal)
    # With the exact inverse of a diagonal operator as preconditioner, one step solves it.
    x = linalg.cg(A, b, maxiter=1, M=lambda r: r / diagonal)
    torch.testing.assert_close(x, b / diagonal)


def test_zero_rhs_returns_zeros():
    x = linalg.cg(spd(3, 8), torch.zeros(3, dtype=torch.float64))
    assert torch.equal(x, torch.zeros(3, dtype=torch.float64))


def test_indefinite_operator_warns():
    A = torch.diag(torch.tensor([1.0, -1.0, 2.0], dtype=torch.float64))
    with pytest.warns(RuntimeWarning, match="not positive definite"):
        linalg.cg(A, torch.tensor([1.0, 1.0, 1.0], dtype=torch.float64), maxiter=3)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"rtol": -1.0}, ValueError, "rtol"),
        ({"atol": float("nan")}, ValueError, "atol"),
        ({"maxiter": -2}, ValueError, "maxiter"),
        ({"x0": torch.zeros(4)}, ValueError, "x0"),
        ({"x0": {"x": torch.zeros(3)}}, ValueError, "structure"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        linalg.cg(torch.eye(3), torch.ones(3), **kwargs)


def test_bad_operators_and_rhs():
    with pytest.raises(ValueError, match="output of A"):
        linalg.cg(lambda v: v[:2], torch.ones(3))
    with pytest.raises(ValueError, match="square"):
        linalg.cg(torch.ones(2, 3), torch.ones(3))
    with pytest.raises(TypeError, match="callable"):
        linalg.cg("not an operator", torch.ones(3))
    with pytest.raises(TypeError, match="floating"):
        linalg.cg(torch.eye(3), torch.ones(3, dtype=torch.int64))
    with pytest.raises(ValueError, match="empty"):
        linalg.cg(lambda v: v, {})
    with pytest.raises(FloatingPointError):
        linalg.cg(lambda v: v * float("nan"), torch.ones(3))


def test_gradient_flows_through_iterations():
    # x(b) = A^{-1} b, so d(sum x)/db = A^{-T} 1.
    A = spd(5, 9)
    b = torch.randn(5, dtype=torch.float64, generator=torch.Generator().manual_seed(10))
    b.requires_grad_(True)
    linalg.cg(A, b, rtol=1e-13).sum().backward()
    torch.testing.assert_close(b.grad, torch.linalg.solve(A.T, torch.ones(5, dtype=torch.float64)))


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    seed=st.integers(0, 2**16),
    preconditioned=st.booleans(),
)
def test_random_spd_pytrees_match_dense_solve(sizes, seed, preconditioned):
    # One SPD matrix coupling every leaf of a tuple of vectors of random sizes.
    n = sum(sizes)
    A = spd(n, seed, cond=100.0)
    g = torch.Generator().manual_seed(seed + 1)
    b = tuple(torch.randn(size, generator=g, dtype=torch.float64) for size in sizes)

    def split(flat):
        return tuple(torch.split(flat, sizes))

    def matvec(x):
        return split(A @ torch.cat(x))

    inverse_diagonal = 1.0 / torch.diagonal(A)
    M = (lambda r: split(inverse_diagonal * torch.cat(r))) if preconditioned else None
    x = linalg.cg(matvec, b, rtol=1e-12, M=M)
    torch.testing.assert_close(torch.cat(x), torch.linalg.solve(A, torch.cat(b)))


def _coupled_problem(dtypes, seed=11):
    # One SPD matrix coupling a dict of leaves of the given dtypes ({'w': (2, 3), 'b': (2,)}).
    A = spd(8, seed, cond=30.0)
    g = torch.Generator().manual_seed(seed)
    b = {"w": torch.randn(2, 3, generator=g, dtype=torch.float64).to(dtypes[0]),
         "b": torch.randn(2, generator=g, dtype=torch.float64).to(dtypes[1])}

    def matvec(tree):
        flat = torch.cat([tree["w"].reshape(-1).double(), tree["b"].double()])
        out = A @ flat
        return {"w": out[:6].reshape(2, 3).to(tree["w"].dtype), "b": out[6:].to(tree["b"].dtype)}

    return A, b, matvec


def test_uniform_and_mixed_dtype_trees_give_the_same_iterates():
    # A uniform tree is iterated as one flat vector, a mixed-dtype one leaf by leaf: the same CG.
    A, b, matvec = _coupled_problem((torch.float64, torch.float64))
    expected = torch.linalg.solve(A, torch.cat([b["w"].reshape(-1), b["b"]]))
    for maxiter in (0, 1, 3):
        uniform = linalg.cg(matvec, b, maxiter=maxiter, rtol=0.0)
        mixed_b = {"w": b["w"], "b": b["b"].to(torch.float32)}
        mixed = linalg.cg(matvec, mixed_b, maxiter=maxiter, rtol=0.0)
        assert mixed["b"].dtype == torch.float32 and mixed["w"].dtype == torch.float64
        torch.testing.assert_close(mixed["w"], uniform["w"], rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(mixed["b"], uniform["b"].float(), rtol=1e-5, atol=1e-6)
    x = linalg.cg(matvec, b, rtol=1e-12)
    assert x["w"].shape == (2, 3) and x["b"].shape == (2,)
    torch.testing.assert_close(torch.cat([x["w"].reshape(-1), x["b"]]), expected)


def test_complex_pytree_matches_dense_solve():
    g = torch.Generator().manual_seed(12)
    Q = torch.randn(5, 5, generator=g, dtype=torch.complex128)
    A = Q @ Q.mH + 5 * torch.eye(5, dtype=torch.complex128)  # Hermitian positive definite
    b = (torch.randn(3, generator=g, dtype=torch.complex128),
         torch.randn(2, generator=g, dtype=torch.complex128))
    x = linalg.cg(lambda v: tuple(torch.split(A @ torch.cat(v), [3, 2])), b, rtol=1e-12)
    torch.testing.assert_close(torch.cat(x), torch.linalg.solve(A, torch.cat(b)))


def test_gradient_flows_through_iterations_on_a_pytree():
    # x(b, A) on a two-leaf tree: d(sum x)/db = A^{-T} 1; for A, CG (which assumes symmetry) is
    # exact along symmetric perturbations, so the symmetric part of A.grad is that of the solve's.
    A, b, _ = _coupled_problem((torch.float64, torch.float64), seed=13)
    A.requires_grad_(True)
    b = {k: v.requires_grad_(True) for k, v in b.items()}

    def matvec(tree):
        out = A @ torch.cat([tree["w"].reshape(-1), tree["b"]])
        return {"w": out[:6].reshape(2, 3), "b": out[6:]}

    x = linalg.cg(matvec, b, rtol=1e-13)
    (x["w"].sum() + x["b"].sum()).backward()
    dense = torch.linalg.solve(A.detach().T, torch.ones(8, dtype=torch.float64))
    torch.testing.assert_close(torch.cat([b["w"].grad.reshape(-1), b["b"].grad]), dense)
    solution = torch.linalg.solve(A.detach(), torch.cat([b["w"].reshape(-1), b["b"]]).detach())
    expected = -torch.outer(dense, solution)
    torch.testing.assert_close(A.grad + A.grad.T, expected + expected.T)


def test_output_of_a_wrong_structure_or_shape_is_named():
    b = {"w": torch.ones(2, 3), "b": torch.ones(2)}
    with pytest.raises(ValueError, match="output of A must have the structure"):
        linalg.cg(lambda v: [v["w"], v["b"]], b)
    with pytest.raises(ValueError, match="output of A must have the leaf shapes"):
        linalg.cg(lambda v: {"w": v["w"].T, "b": v["b"]}, b)
    with pytest.raises(ValueError, match="x0 must have the leaf shapes"):
        linalg.cg(lambda v: v, b, x0={"w": torch.ones(3), "b": torch.ones(2)})
