"""custom_root: implicit gradients against closed forms, unrolled differentiation and gradcheck."""

import warnings

import numpy as np
import pytest
import torch

from diffopt import linear_solve
from diffopt.diff.implicit import custom_root
from diffopt.linalg import NeumannDivergenceWarning

DTYPE = torch.float64


def regression_data(n=30, d=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g, dtype=DTYPE)
    y = X @ torch.randn(d, generator=g, dtype=DTYPE) + 0.1 * torch.randn(
        n, generator=g, dtype=DTYPE
    )
    return X, y


# --- ridge regression: w*(lam) = (X^T X + lam I)^{-1} X^T y -----------------------------------

X_TRAIN, Y_TRAIN = regression_data(seed=0)
X_VAL, Y_VAL = regression_data(seed=1)


def ridge_optimality(w, lam, X, y):
    return X.T @ (X @ w - y) + lam * w


def ridge_closed_form_hypergradient(lam):
    d = X_TRAIN.shape[1]
    H = X_TRAIN.T @ X_TRAIN + lam * torch.eye(d, dtype=DTYPE)
    w = torch.linalg.solve(H, X_TRAIN.T @ Y_TRAIN)
    outer_grad_w = X_VAL.T @ (X_VAL @ w - Y_VAL)
    # dw/dlam = -H^{-1} w, so dL/dlam = -outer_grad_w^T H^{-1} w.
    return -(outer_grad_w @ torch.linalg.solve(H, w))


def make_ridge_solver(solve):
    @custom_root(ridge_optimality, argnums=1, solve=solve)
    def ridge_solver(w0, lam, X, y):
        # A non-differentiable solver: the closed form computed in numpy.
        d = X.shape[1]
        H = X.T.numpy() @ X.numpy() + float(lam) * np.eye(d)
        return torch.from_numpy(np.linalg.solve(H, X.T.numpy() @ y.numpy()))

    return ridge_solver


def outer_loss(w):
    return 0.5 * (X_VAL @ w - Y_VAL).pow(2).sum()


@pytest.mark.parametrize(
    ("solve", "tolerance"),
    [
        (linear_solve.solve_inv(), 1e-8),
        (linear_solve.solve_cg(rtol=1e-10), 1e-5),
        (linear_solve.solve_normal_cg(rtol=1e-10), 1e-5),
        (None, 1e-4),  # the default, normal CG with rtol=1e-5
        (linear_solve.solve_gmres(rtol=1e-12), 1e-8),
        (linear_solve.solve_bicgstab(rtol=1e-12), 1e-8),
        (linear_solve.solve_lu(), 1e-8),
        (linear_solve.solve_cholesky(), 1e-8),
    ],
)
def test_ridge_hypergradient_matches_closed_form(solve, tolerance):
    lam = torch.tensor(0.7, dtype=DTYPE, requires_grad=True)
    w = make_ridge_solver(solve)(torch.zeros(4, dtype=DTYPE), lam, X_TRAIN, Y_TRAIN)
    (grad,) = torch.autograd.grad(outer_loss(w), lam)
    expected = ridge_closed_form_hypergradient(0.7)
    assert abs(grad - expected) <= tolerance * abs(expected)


def test_gradcheck_with_direct_solve():
    solver = make_ridge_solver(linear_solve.solve_inv())
    lam = torch.tensor(0.3, dtype=DTYPE, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda lam: solver(torch.zeros(4, dtype=DTYPE), lam, X_TRAIN, Y_TRAIN), (lam,)
    )


def test_dict_meta_parameters_and_dict_solution():
    # Per-feature penalties in a dict (TorchOpt's custom_root rejects dicts) and a solution with
    # an unpenalized intercept: {'w': (d,), 'b': ()}.
    def optimality(params, hyper, X, y):
        residual = X @ params["w"] + params["b"] - y
        return {"w": X.T @ residual + hyper["l2"] * params["w"], "b": residual.sum()}

    @custom_root(optimality, argnums=1, solve=linear_solve.solve_inv())
    def solver(init, hyper, X, y):
        n, d = X.shape
        A = torch.zeros(d + 1, d + 1, dtype=DTYPE)
        Xa = torch.cat([X, torch.ones(n, 1, dtype=DTYPE)], dim=1)
        A += Xa.T @ Xa
        A[:d, :d] += torch.diag(hyper["l2"])
        sol = torch.linalg.solve(A, Xa.T @ y)
        return {"w": sol[:d], "b": sol[d]}

    def closed_form(l2):
        n, d = X_TRAIN.shape
        Xa = torch.cat([X_TRAIN, torch.ones(n, 1, dtype=DTYPE)], dim=1)
        penalty = torch.diag(torch.cat([l2, torch.zeros(1, dtype=DTYPE)]))
        sol = torch.linalg.solve(Xa.T @ Xa + penalty, Xa.T @ Y_TRAIN)
        return 0.5 * (X_VAL @ sol[:d] + sol[d] - Y_VAL).pow(2).sum()

    l2 = torch.tensor([0.5, 1.0, 2.0, 4.0], dtype=DTYPE, requires_grad=True)
    init = {"w": torch.zeros(4, dtype=DTYPE), "b": torch.zeros((), dtype=DTYPE)}
    params = solver(init, {"l2": l2}, X_TRAIN, Y_TRAIN)
    assert set(params) == {"w", "b"}
    loss = 0.5 * (X_VAL @ params["w"] + params["b"] - Y_VAL).pow(2).sum()
    (grad,) = torch.autograd.grad(loss, l2)
    (expected,) = torch.autograd.grad(closed_form(l2), l2)  # autograd through the dense solve
    torch.testing.assert_close(grad, expected, rtol=1e-8, atol=1e-12)


# --- iMAML-style proximal inner problem against unrolled differentiation -----------------------

X_TASK, Y_TASK = regression_data(n=25, d=3, seed=2)
LABELS = (Y_TASK > 0).to(DTYPE)
PROX = 2.0


def task_loss(phi):
    logits = X_TASK @ phi["w"] + phi["b"]
    return torch.nn.functional.binary_cross_entropy_with_logits(logits, LABELS)


def inner_objective(phi, theta):
    penalty = sum((phi[k] - theta[k]).pow(2).sum() for k in phi)
    return task_loss(phi) + 0.5 * PROX * penalty


def imaml_optimality(phi, theta):
    with torch.enable_grad():
        grads = torch.autograd.grad(
            inner_objective(phi, theta), list(phi.values()), create_graph=True
        )
    return dict(zip(phi.keys(), grads))


def meta_loss(phi):
    return (X_VAL[:, :3] @ phi["w"] + phi["b"] - Y_VAL).pow(2).mean()


def test_imaml_proximal_matches_unrolled_to_convergence():
    g = torch.Generator().manual_seed(3)
    theta = {
        "w": torch.randn(3, generator=g, dtype=DTYPE).requires_grad_(),
        "b": torch.zeros((), dtype=DTYPE).requires_grad_(),
    }

    # Unrolled: differentiate through 300 gradient steps (converged to ~1e-13).
    phi = {k: v for k, v in theta.items()}
    for _ in range(300):
        grads = torch.autograd.grad(
            inner_objective(phi, theta), list(phi.values()), create_graph=True
        )
        phi = {k: v - 0.25 * gk for (k, v), gk in zip(phi.items(), grads)}
    unrolled = torch.autograd.grad(meta_loss(phi), list(theta.values()))

    # Implicit: the same inner problem solved by torch.optim (in place, not differentiable).
    @custom_root(imaml_optimality, argnums=1, solve=linear_solve.solve_cg(rtol=1e-12))
    def inner_solver(init, theta):
        phi = {k: v.detach().clone().requires_grad_() for k, v in init.items()}
        optimizer = torch.optim.SGD(list(phi.values()), lr=0.25)
        for _ in range(300):
            optimizer.zero_grad()
            inner_objective(phi, theta).backward()
            optimizer.step()
        return phi

    phi_star = inner_solver({k: v.detach() for k, v in theta.items()}, theta)
    implicit = torch.autograd.grad(meta_loss(phi_star), list(theta.values()))
    for a, b in zip(implicit, unrolled):
        torch.testing.assert_close(a, b, rtol=1e-7, atol=1e-10)
    assert all(v.grad is None for v in theta.values())  # the solver did not leak into theta.grad


def test_neumann_agrees_with_cg_where_it_converges_and_warns_where_not():
    theta = {"w": torch.ones(3, dtype=DTYPE, requires_grad=True), "b": torch.zeros((), dtype=DTYPE)}

    def hypergradient(solve):
        @custom_root(imaml_optimality, argnums=1, solve=solve)
        def inner_solver(init, theta):
            phi = {k: v.clone() for k, v in init.items()}
            for _ in range(200):
                grads = imaml_optimality({k: v.requires_grad_() for k, v in phi.items()}, theta)
                phi = {k: (v - 0.25 * grads[k]).detach() for k, v in phi.items()}
            return phi

        phi = inner_solver({k: v.detach() for k, v in theta.items()}, theta)
        return torch.autograd.grad(meta_loss(phi), theta["w"])[0]

    cg = hypergradient(linear_solve.solve_cg(rtol=1e-12))
    # The Hessian's eigenvalues lie in [PROX, PROX + ~2]: alpha = 0.25 makes rho(I - alpha H) < 1.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        neumann = hypergradient(linear_solve.solve_inv(ns=True, alpha=0.25, maxiter=200))
    torch.testing.assert_close(neumann, cg, rtol=1e-8, atol=1e-12)
    with pytest.warns(NeumannDivergenceWarning):
        hypergradient(linear_solve.solve_inv(ns=True, alpha=1.5, maxiter=30))


# --- API details --------------------------------------------------------------------------------


def test_several_argnums_keywords_and_aux():
    def optimality(x, a, b, *, scale=1.0):
        return scale * (x - a * b)

    @custom_root(optimality, argnums=(1, 2), has_aux=True, solve=linear_solve.solve_inv())
    def solver(x0, a, b, *, scale=1.0, verbose=False):  # `verbose` is not passed to optimality
        return (a * b).detach().clone(), {"iterations": 0}

    a = torch.tensor([1.0, 2.0], dtype=DTYPE, requires_grad=True)
    b = torch.tensor([3.0, 4.0], dtype=DTYPE, requires_grad=True)
    x, aux = solver(torch.zeros(2, dtype=DTYPE), a, b=b, scale=2.0, verbose=True)
    assert aux == {"iterations": 0}
    ga, gb = torch.autograd.grad(x.sum(), (a, b))
    torch.testing.assert_close(ga, b.detach())
    torch.testing.assert_close(gb, a.detach())


def test_no_graph_without_grad():
    solver = make_ridge_solver(linear_solve.solve_inv())
    lam = torch.tensor(0.5, dtype=DTYPE, requires_grad=True)
    with torch.no_grad():
        w = solver(torch.zeros(4, dtype=DTYPE), lam, X_TRAIN, Y_TRAIN)
    assert w.grad_fn is None and not w.requires_grad
    w = solver(torch.zeros(4, dtype=DTYPE), lam.detach(), X_TRAIN, Y_TRAIN)
    assert not w.requires_grad


def test_bad_argnums():
    with pytest.raises(ValueError, match="cannot include 0"):
        custom_root(ridge_optimality, argnums=0)
    with pytest.raises(ValueError, match="non-negative"):
        custom_root(ridge_optimality, argnums=(1, -1))
    with pytest.raises(ValueError, match="repeated"):
        custom_root(ridge_optimality, argnums=(1, 1))
    with pytest.raises(TypeError, match="ints"):
        custom_root(ridge_optimality, argnums=(1.0,))
    solver = custom_root(ridge_optimality, argnums=7)(lambda w0, lam, X, y: w0)
    with pytest.raises(ValueError, match="out of range"):
        solver(torch.zeros(4, dtype=DTYPE), torch.tensor(1.0), X_TRAIN, Y_TRAIN)
    solver = custom_root(ridge_optimality, argnums=1)(lambda w0, lam, X, y: w0)
    with pytest.raises(TypeError, match="no floating-point tensor"):
        solver(torch.zeros(4, dtype=DTYPE), 1.0, X_TRAIN, Y_TRAIN)


def test_optimality_returning_a_different_tree_is_reported():
    def wrong_structure(w, lam):
        return {"w": w - lam}

    def wrong_shape(w, lam):
        return (w - lam).sum()

    for optimality, match in ((wrong_structure, "structure"), (wrong_shape, "shaped like")):
        solver = custom_root(optimality, argnums=1)(lambda w0, lam: w0 + lam.detach())
        lam = torch.tensor(1.0, requires_grad=True)
        w = solver(torch.zeros(3), lam)
        with pytest.raises(ValueError, match=match):
            w.sum().backward()


def test_bad_solver_outputs():
    lam = torch.tensor(1.0, requires_grad=True)
    solver = custom_root(lambda w, lam: w - lam, argnums=1)(lambda w0, lam: "not a tensor")
    with pytest.raises(TypeError, match="tensor"):
        solver(torch.zeros(1), lam)
    solver = custom_root(lambda w, lam: w - lam, argnums=1, has_aux=True)(lambda w0, lam: w0)
    with pytest.raises(TypeError, match="aux"):
        solver(torch.zeros(1), lam)
    with pytest.raises(TypeError, match="solve"):
        custom_root(lambda w, lam: w - lam, argnums=1, solve="cg")


def test_mixed_leaves_in_arguments_and_solution():
    # Non-float leaves (an int tensor, a Python number, None) ride along untouched.
    def optimality(sol, hyper):
        return {"x": sol["x"] - hyper["scale"] * 2.0, "count": torch.zeros_like(sol["count"])}

    @custom_root(optimality, argnums=1, solve=linear_solve.solve_inv())
    def solver(init, hyper):
        assert hyper["name"] == "h" and hyper["unused"] is None
        x = hyper["scale"] * 2.0
        return {"x": x, "count": torch.tensor(7)}

    scale = torch.tensor([1.0, 3.0], dtype=DTYPE, requires_grad=True)
    hyper = {"scale": scale, "name": "h", "unused": None, "steps": torch.tensor(3)}
    sol = solver({"x": torch.zeros(2, dtype=DTYPE), "count": torch.tensor(0)}, hyper)
    assert sol["count"].item() == 7 and not sol["count"].requires_grad
    (grad,) = torch.autograd.grad(sol["x"].sum(), scale)
    torch.testing.assert_close(grad, torch.full((2,), 2.0, dtype=DTYPE))


def test_linear_solver_sees_the_solution_structure():
    # A solver configured with an `init` shaped like the (dict) solution works inside custom_root.
    def optimality(sol, lam):
        return {"a": 2.0 * sol["a"] - lam, "b": 4.0 * sol["b"] - lam}

    init = {"a": torch.zeros(2, dtype=DTYPE), "b": torch.zeros(1, dtype=DTYPE)}
    solve = linear_solve.solve_cg(init=init, rtol=1e-12)

    @custom_root(optimality, argnums=1, solve=solve)
    def solver(x0, lam):
        return {
            "a": lam.detach() / 2 * torch.ones(2, dtype=DTYPE),
            "b": lam.detach() / 4 * torch.ones(1, dtype=DTYPE),
        }

    lam = torch.tensor(1.0, dtype=DTYPE, requires_grad=True)
    sol = solver(init, lam)
    (grad,) = torch.autograd.grad(sol["a"].sum() + sol["b"].sum(), lam)
    torch.testing.assert_close(grad, torch.tensor(2 * 0.5 + 0.25, dtype=DTYPE))


def test_solver_returning_misshaped_leaves_is_reported():
    lam = torch.tensor(1.0, dtype=DTYPE, requires_grad=True)

    def bad_solve(matvec, b):
        return b.reshape(1, -1)  # the right tree (one tensor), the wrong shape

    solver = custom_root(ridge_optimality, argnums=1, solve=bad_solve)(
        lambda w0, lam, X, y: torch.zeros(4, dtype=DTYPE))
    w = solver(torch.zeros(4, dtype=DTYPE), lam, X_TRAIN, Y_TRAIN)
    with pytest.raises(RuntimeError, match="shape"):
        torch.autograd.grad(outer_loss(w), lam)
