"""diffopt.linear_solve: every solver against dense float64 solves (solve_cg, solve_normal_cg,
solve_inv, solve_gmres, solve_bicgstab, solve_lu, solve_cholesky)."""

import warnings

import pytest
import torch

import diffopt
from diffopt import linear_solve


def random_matrix(n, seed, symmetric):
    g = torch.Generator().manual_seed(seed)
    m = torch.randn(n, n, generator=g, dtype=torch.float64)
    if symmetric:
        return m @ m.T + n * torch.eye(n, dtype=torch.float64)
    return m + n * torch.eye(n, dtype=torch.float64)


def tree_matvec(A):
    # A dense matrix acting on a {'w': (2, 2), 'b': (n - 4,)} tree.
    def matvec(tree):
        out = A @ torch.cat([tree["w"].reshape(-1), tree["b"]])
        return {"w": out[:4].reshape(2, 2), "b": out[4:]}

    return matvec


def tree_rhs(n, seed):
    g = torch.Generator().manual_seed(seed)
    return {
        "w": torch.randn(2, 2, generator=g, dtype=torch.float64),
        "b": torch.randn(n - 4, generator=g, dtype=torch.float64),
    }


def flat(tree):
    return torch.cat([tree["w"].reshape(-1), tree["b"]])


SOLVERS = {
    "cg": (linear_solve.solve_cg, {"rtol": 1e-12}, True),
    "normal_cg": (linear_solve.solve_normal_cg, {"rtol": 1e-13}, False),
    "inv": (linear_solve.solve_inv, {}, False),
    "inv_ns": (linear_solve.solve_inv, {"ns": True, "maxiter": 600}, True),
    "gmres": (linear_solve.solve_gmres, {"rtol": 1e-13}, False),
    "gmres_restart_3": (linear_solve.solve_gmres, {"rtol": 1e-13, "restart": 3}, False),
    "bicgstab": (linear_solve.solve_bicgstab, {"rtol": 1e-13}, False),
    "lu": (linear_solve.solve_lu, {}, False),
    "cholesky": (linear_solve.solve_cholesky, {}, True),
}


@pytest.mark.parametrize("name", list(SOLVERS))
@pytest.mark.parametrize("ridge", [None, 0.5])
def test_solvers_match_dense_solve_on_pytrees(name, ridge):
    solver, options, needs_spd = SOLVERS[name]
    n = 7
    A = random_matrix(n, 0, symmetric=needs_spd)
    if name == "inv_ns":
        A = A / (1.1 * torch.linalg.eigvalsh(A).max())  # spectrum inside (0, 1): series converges
    b = tree_rhs(n, 1)
    ridge_matrix = 0.0 if ridge is None else ridge * torch.eye(n, dtype=torch.float64)
    if name == "normal_cg":
        expected = torch.linalg.solve(A.T @ A + ridge_matrix, A.T @ flat(b))
    else:
        expected = torch.linalg.solve(A + ridge_matrix, flat(b))
    direct = solver(tree_matvec(A), b, ridge=ridge, **options)
    configured = solver(ridge=ridge, **options)(tree_matvec(A), b)
    torch.testing.assert_close(flat(direct), expected, rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(flat(configured), flat(direct))


def test_normal_cg_solves_a_non_symmetric_system_that_cg_cannot():
    A = torch.tensor([[0.0, 1.0], [-1.0, 0.0]], dtype=torch.float64)  # rotation: x^T A x = 0
    b = torch.tensor([1.0, 2.0], dtype=torch.float64)
    x = linear_solve.solve_normal_cg(lambda v: A @ v, b, rtol=1e-12)
    torch.testing.assert_close(A @ x, b)
    assert not torch.allclose(A @ linear_solve.solve_cg(lambda v: A @ v, b), b)


@pytest.mark.parametrize("solver", [linear_solve.solve_cg, linear_solve.solve_normal_cg])
def test_init_is_used_as_starting_point(solver):
    A = random_matrix(5, 2, symmetric=True)
    b = torch.ones(5, dtype=torch.float64)
    exact = torch.linalg.solve(A, b)
    # Starting at the solution, zero iterations already give it.
    torch.testing.assert_close(solver(lambda v: A @ v, b, init=exact, maxiter=0), exact)
    assert not torch.allclose(solver(lambda v: A @ v, b, maxiter=0), exact)


def test_inv_ns_with_init_solves_for_the_correction():
    A = 0.5 * torch.eye(3, dtype=torch.float64)
    b = torch.ones(3, dtype=torch.float64)
    init = torch.full((3,), 2.0, dtype=torch.float64)  # the exact solution
    x = linear_solve.solve_inv(lambda v: A @ v, b, init=init, ns=True, maxiter=0)
    torch.testing.assert_close(x, init)


def test_inv_handles_a_scalar_system():
    x = linear_solve.solve_inv(lambda v: 4.0 * v, torch.tensor(2.0, dtype=torch.float64))
    assert x.shape == () and float(x) == 0.5


def test_configuration_errors_are_raised_early():
    with pytest.raises(TypeError):
        linear_solve.solve_cg(tolerance=1e-3)
    with pytest.raises(ValueError, match="ridge"):
        linear_solve.solve_normal_cg(ridge=-1.0)
    with pytest.raises(TypeError, match="ns=True"):
        linear_solve.solve_inv(maxiter=3)
    with pytest.raises(TypeError, match="right-hand side"):
        linear_solve.solve_cg(lambda v: v)
    with pytest.raises(TypeError, match="callable"):
        linear_solve.solve_inv("not an operator", torch.ones(2))
    with pytest.raises(TypeError, match="unexpected"):
        linear_solve.solve_inv(matrix=torch.eye(2))
    with pytest.raises(TypeError, match="both"):
        linear_solve.solve_cg(lambda v: v, torch.ones(2), b=torch.ones(2))
    with pytest.raises(ValueError, match="restart"):
        linear_solve.solve_gmres(lambda v: v, torch.ones(2), restart=0)
    with pytest.raises(ValueError, match="maxiter"):
        linear_solve.solve_bicgstab(lambda v: v, torch.ones(2), maxiter=-1)
    with pytest.raises(TypeError, match="callable"):
        linear_solve.solve_lu(3.0, torch.ones(2))
    with pytest.raises(ValueError, match="output of matvec"):
        linear_solve.solve_lu(lambda v: v[:1], torch.ones(2))
    with pytest.raises(ValueError, match="output of A"):
        linear_solve.solve_gmres(lambda v: torch.ones(3), torch.ones(2))


@pytest.mark.parametrize("factory", [linear_solve.solve_gmres, linear_solve.solve_bicgstab])
def test_krylov_solvers_solve_a_non_symmetric_200_system_to_1e_8(factory):
    n = 200
    g = torch.Generator().manual_seed(11)
    A = torch.randn(n, n, generator=g, dtype=torch.float64) / n**0.5 + 2.0 * torch.eye(
        n, dtype=torch.float64
    )
    assert (A - A.T).abs().max() > 0.1  # far from symmetric
    assert torch.linalg.cond(A) < 10  # well conditioned
    b = torch.randn(n, generator=g, dtype=torch.float64)
    x = factory(lambda v: A @ v, b, rtol=1e-12)
    expected = torch.linalg.solve(A, b)
    assert float((x - expected).norm() / expected.norm()) < 1e-8
    assert float((A @ x - b).norm() / b.norm()) < 1e-8


@pytest.mark.parametrize("factory", [linear_solve.solve_gmres, linear_solve.solve_bicgstab])
def test_krylov_solvers_warn_when_they_stop_short(factory):
    A = random_matrix(30, 4, symmetric=False)
    b = torch.ones(30, dtype=torch.float64)
    with pytest.warns(diffopt.linalg.ConvergenceWarning, match="did not converge"):
        x = factory(lambda v: A @ v, b, rtol=1e-12, maxiter=2)
    assert float((A @ x - b).norm()) > 1e-12 * float(b.norm())  # it really did stop short
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and a converged solve is silent
        factory(lambda v: A @ v, b, rtol=1e-10)


def test_lu_and_cholesky_are_exact_on_small_integer_systems():
    # Integer systems whose solutions are exact in binary: the factorizations give them exactly.
    A = torch.tensor([[4.0, 2.0, 0.0], [2.0, 5.0, 2.0], [0.0, 2.0, 5.0]], dtype=torch.float64)
    x = torch.tensor([1.0, -1.0, 2.0], dtype=torch.float64)
    for factory in (linear_solve.solve_lu, linear_solve.solve_cholesky):
        torch.testing.assert_close(factory(lambda v: A @ v, A @ x), x, rtol=0, atol=1e-14)


def test_cholesky_rejects_non_symmetric_and_indefinite_operators():
    with pytest.raises(ValueError, match="not symmetric"):
        A = random_matrix(4, 0, symmetric=False)
        linear_solve.solve_cholesky(lambda v: A @ v, torch.ones(4, dtype=torch.float64))
    indefinite = torch.diag(torch.tensor([1.0, -1.0], dtype=torch.float64))
    with pytest.raises(ValueError, match="not positive definite"):
        linear_solve.solve_cholesky(lambda v: indefinite @ v, torch.ones(2, dtype=torch.float64))
    # A ridge makes it definite: (D + 2 I) x = 1 gives x = (1/3, 1).
    x = linear_solve.solve_cholesky(lambda v: indefinite @ v, torch.ones(2, dtype=torch.float64),
                                    ridge=2.0)
    torch.testing.assert_close(x, torch.tensor([1 / 3, 1.0], dtype=torch.float64))


def test_cholesky_accepts_a_hessian_symmetric_up_to_rounding():
    g = torch.Generator().manual_seed(5)
    X = torch.randn(40, 6, generator=g, dtype=torch.float64)
    w = torch.randn(6, generator=g, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(torch.log1p((X @ w).exp()).sum(), w, create_graph=True)

    def hvp(v):
        return torch.autograd.grad(grad, w, v, retain_graph=True)[0]

    b = torch.ones(6, dtype=torch.float64)
    H = torch.stack([hvp(e) for e in torch.eye(6, dtype=torch.float64)])
    torch.testing.assert_close(linear_solve.solve_cholesky(hvp, b), torch.linalg.solve(H, b))


def test_normal_cg_needs_a_differentiable_matvec():
    def opaque(v):  # goes through numpy: no autograd graph
        return torch.from_numpy(2.0 * v.detach().numpy())

    with pytest.raises(RuntimeError, match="differentiable"):
        linear_solve.solve_normal_cg(opaque, torch.ones(2, dtype=torch.float64))


def test_tol_is_an_alias_of_rtol():
    A = random_matrix(6, 3, symmetric=True)
    b = torch.ones(6, dtype=torch.float64)
    for solver in (linear_solve.solve_cg, linear_solve.solve_normal_cg):
        torch.testing.assert_close(
            solver(lambda v: A @ v, b, tol=1e-3), solver(lambda v: A @ v, b, rtol=1e-3)
        )
        assert not torch.equal(
            solver(lambda v: A @ v, b, tol=1e-2), solver(lambda v: A @ v, b, rtol=1e-12)
        )


ALL_FACTORIES = [
    linear_solve.solve_cg,
    linear_solve.solve_normal_cg,
    linear_solve.solve_inv,
    linear_solve.solve_gmres,
    linear_solve.solve_bicgstab,
    linear_solve.solve_lu,
    linear_solve.solve_cholesky,
]
DIRECT = (linear_solve.solve_inv, linear_solve.solve_lu, linear_solve.solve_cholesky)


@pytest.mark.parametrize("factory", ALL_FACTORIES)
def test_a_matrix_or_tree_of_matrices_stands_for_matvec(factory):
    A = random_matrix(5, 7, symmetric=True)
    b = torch.arange(1.0, 6.0, dtype=torch.float64)
    expected = torch.linalg.solve(A, b)
    options = {} if factory in DIRECT else {"rtol": 1e-12}
    torch.testing.assert_close(factory(A, b, **options), expected)
    # A tree of matrices is block-diagonal; a (n, 1) column leaf is solved as a column.
    blocks = {"a": A, "c": 2.0 * torch.eye(3, dtype=torch.float64)}
    rhs = {"a": b[:, None], "c": torch.ones(3, 1, dtype=torch.float64)}
    x = factory(blocks, rhs, **options)
    torch.testing.assert_close(x["a"], expected[:, None])
    torch.testing.assert_close(x["c"], torch.full((3, 1), 0.5, dtype=torch.float64))


@pytest.mark.parametrize("factory", ALL_FACTORIES)
def test_keyword_operands_configure_a_solver_with_defaults(factory):
    # TorchOpt's factories take matvec=/b= by keyword and return a solver with them bound.
    A = random_matrix(4, 3, symmetric=True)
    b = torch.ones(4, dtype=torch.float64)
    options = {} if factory in DIRECT else {"rtol": 1e-12}
    solver = factory(matvec=lambda v: A @ v, b=b, **options)
    assert callable(solver) and not isinstance(solver, torch.Tensor)
    torch.testing.assert_close(solver(), torch.linalg.solve(A, b))
    other = 2.0 * b
    torch.testing.assert_close(solver(b=other), torch.linalg.solve(A, other))
    torch.testing.assert_close(solver(lambda v: 2.0 * A @ v, b), torch.linalg.solve(2.0 * A, b))


class _CountingMode(torch.overrides.TorchFunctionMode):
    """A pass-through __torch_function__ mode that counts torch.autograd.grad calls."""

    def __init__(self):
        super().__init__()
        self.grad_calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.autograd.grad:
            self.grad_calls += 1
        return func(*args, **(kwargs or {}))


def test_vjp_engine_path_matches_torch_autograd_grad_and_yields_to_modes():
    from diffopt.linear_solve._utils import vjp

    g = torch.Generator().manual_seed(0)
    A = torch.randn(3, 3, generator=g, dtype=torch.float64)
    x = torch.randn(3, generator=g, dtype=torch.float64, requires_grad=True)
    unused = torch.randn(2, generator=g, dtype=torch.float64, requires_grad=True)
    constant = torch.ones(2, dtype=torch.float64)  # an output that does not require grad
    outputs = [torch.tanh(A @ x), constant]
    w = [torch.randn(3, generator=g, dtype=torch.float64), torch.ones(2, dtype=torch.float64)]
    expected = (A.T @ (w[0] * (1 - torch.tanh(A @ x) ** 2))).detach()
    got = vjp(outputs, [x, unused], w, retain_graph=True)
    torch.testing.assert_close(got[0], expected)
    assert torch.equal(got[1], torch.zeros(2, dtype=torch.float64))
    mode = _CountingMode()
    with mode:
        moded = vjp(outputs, [x, unused], w, retain_graph=True)
    assert mode.grad_calls == 1  # a mode sees the public call, not the engine shortcut
    torch.testing.assert_close(moded[0], expected)
    with pytest.raises(RuntimeError, match="shape"):
        vjp(outputs, [x], [w[0][:2], w[1]], retain_graph=True)
    # Under grad mode the product is itself differentiable (a double backward).
    with torch.enable_grad():
        (first,) = vjp(outputs[:1], [x], w[:1], retain_graph=True)
    assert first.requires_grad
