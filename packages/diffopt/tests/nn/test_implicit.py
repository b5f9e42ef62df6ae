"""ImplicitMetaGradientModule: the same meta-gradients as custom_root and as unrolling."""

import pytest
import torch

from diffopt import linear_solve
from diffopt.diff.implicit import custom_root
from diffopt.nn import ImplicitMetaGradientModule

DTYPE = torch.float64
G = torch.Generator().manual_seed(0)
X = torch.randn(25, 3, generator=G, dtype=DTYPE)
LABELS = (X @ torch.tensor([1.0, -2.0, 0.5], dtype=DTYPE) > 0).to(DTYPE)
X_VAL = torch.randn(10, 3, generator=G, dtype=DTYPE)
Y_VAL = torch.randn(10, generator=G, dtype=DTYPE)
PROX = 2.0


def task_loss(w, b):
    return torch.nn.functional.binary_cross_entropy_with_logits(X @ w + b, LABELS)


def meta_loss(w, b):
    return (X_VAL @ w + b - Y_VAL).pow(2).mean()


def make_theta():
    return (
        torch.tensor([0.3, -0.1, 0.2], dtype=DTYPE, requires_grad=True),
        torch.tensor(0.1, dtype=DTYPE, requires_grad=True),
    )


class ProximalLogistic(ImplicitMetaGradientModule, linear_solve=linear_solve.solve_cg(rtol=1e-12)):
    def __init__(self, theta_w, theta_b):
        super().__init__()
        self.theta_w = theta_w  # meta-parameters: passed to the constructor
        self.theta_b = theta_b
        self.w = torch.nn.Parameter(theta_w.detach().clone())
        self.b = torch.nn.Parameter(theta_b.detach().clone())

    def objective(self, x, labels):
        task = torch.nn.functional.binary_cross_entropy_with_logits(x @ self.w + self.b, labels)
        penalty = (self.w - self.theta_w).pow(2).sum() + (self.b - self.theta_b).pow(2)
        return task + 0.5 * PROX * penalty

    def solve(self, x, labels):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.25)
        for _ in range(300):
            optimizer.zero_grad()
            self.objective(x, labels).backward()  # no inputs=: the meta-parameters are detached
            optimizer.step()
        return self


class ProximalLogisticWithOptimality(ProximalLogistic):
    def optimality(self, x, labels):
        residual = torch.sigmoid(x @ self.w + self.b) - labels
        return {  # a dict keyed by parameter name is accepted too
            "w": x.T @ residual / len(labels) + PROX * (self.w - self.theta_w),
            "b": residual.mean() + PROX * (self.b - self.theta_b),
        }


def unrolled_meta_gradient():
    theta_w, theta_b = make_theta()
    w, b = theta_w, theta_b
    for _ in range(300):
        inner = task_loss(w, b) + 0.5 * PROX * ((w - theta_w).pow(2).sum() + (b - theta_b).pow(2))
        gw, gb = torch.autograd.grad(inner, (w, b), create_graph=True)
        w, b = w - 0.25 * gw, b - 0.25 * gb
    return torch.autograd.grad(meta_loss(w, b), (theta_w, theta_b))


def functional_meta_gradient():
    def optimality(params, theta):
        with torch.enable_grad():
            inner = task_loss(*params) + 0.5 * PROX * sum(
                (p - t).pow(2).sum() for p, t in zip(params, theta)
            )
            return torch.autograd.grad(inner, params, create_graph=True)

    @custom_root(optimality, argnums=1, solve=linear_solve.solve_cg(rtol=1e-12))
    def solver(params, theta):
        params = [p.clone().requires_grad_() for p in params]
        for _ in range(300):
            grads = optimality(params, theta)
            params = [(p - 0.25 * g).detach().requires_grad_() for p, g in zip(params, grads)]
        return tuple(p.detach() for p in params)

    theta = make_theta()
    w, b = solver(tuple(t.detach() for t in theta), theta)
    return torch.autograd.grad(meta_loss(w, b), theta)


@pytest.mark.parametrize("cls", [ProximalLogistic, ProximalLogisticWithOptimality])
def test_module_matches_functional_and_unrolled(cls):
    theta_w, theta_b = make_theta()
    inner = cls(theta_w, theta_b)
    assert [n for n, _ in inner.named_parameters()] == ["w", "b"]
    assert [n for n, _ in inner.named_meta_parameters()] == ["theta_w", "theta_b"]
    assert inner.solve(X, LABELS) is inner
    assert inner.w.grad_fn is not None  # the solution is now a function of the meta-parameters
    module_grads = torch.autograd.grad(meta_loss(inner.w, inner.b), (theta_w, theta_b))
    assert theta_w.grad is None  # the solver's backward() calls did not reach the meta-params
    for module, functional, unrolled in zip(
        module_grads, functional_meta_gradient(), unrolled_meta_gradient()
    ):
        torch.testing.assert_close(module, functional, rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(module, unrolled, rtol=1e-7, atol=1e-10)


def test_linear_solve_keyword_is_used():
    calls = []

    def counting_inverse(matvec, b):
        calls.append(1)
        return linear_solve.solve_inv(matvec, b)

    class DirectSolve(ProximalLogistic, linear_solve=counting_inverse):
        pass

    theta = make_theta()
    inner = DirectSolve(*theta)
    inner.solve(X, LABELS)
    grads = torch.autograd.grad(meta_loss(inner.w, inner.b), theta)
    assert calls == [1]
    for direct, unrolled in zip(grads, unrolled_meta_gradient()):
        torch.testing.assert_close(direct, unrolled, rtol=1e-7, atol=1e-10)


def test_meta_module_and_repeated_solves():
    class Inner(ImplicitMetaGradientModule, linear_solve=linear_solve.solve_cg(rtol=1e-12)):
        def __init__(self, meta_net):
            super().__init__()
            self.meta_net = meta_net  # a meta-module: its parameters are the meta-parameters
            self.net = torch.nn.Linear(3, 1).to(DTYPE)

        def objective(self, x, y):
            fit = (self.net(x).squeeze(-1) - y).pow(2).mean()
            prox = sum(
                (p - q).pow(2).sum()
                for p, q in zip(self.net.parameters(), self.meta_net.parameters())
            )
            return fit + prox

        def solve(self, x, y):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            for _ in range(400):
                optimizer.zero_grad()
                self.objective(x, y).backward()
                optimizer.step()
            return self

    meta_net = torch.nn.Linear(3, 1).to(DTYPE)
    inner = Inner(meta_net)
    assert len(list(inner.meta_parameters())) == 2 and len(list(inner.parameters())) == 2
    y = X @ torch.tensor([1.0, 2.0, 3.0], dtype=DTYPE)
    for _ in range(2):  # a second solve restarts from the (detached) previous solution
        inner.solve(X, y)
        meta_loss(inner.net.weight.squeeze(0), inner.net.bias.squeeze(0)).backward()
    # Closed form: with the fit's Hessian H (in [W, b] coordinates) and prox Hessian 2I,
    # d params*/d meta = 2 (H + 2I)^{-1}, the same at both solves (quadratic inner problem).
    Xa = torch.cat([X, torch.ones(len(X), 1, dtype=DTYPE)], dim=1)
    H = 2 * Xa.T @ Xa / len(X)
    params = torch.cat([inner.net.weight.detach().squeeze(0), inner.net.bias.detach()])
    outer = (
        2
        * torch.cat([X_VAL, torch.ones(10, 1, dtype=DTYPE)], 1).T
        @ (X_VAL @ params[:3] + params[3] - Y_VAL)
        / 10
    )
    expected = 2 * torch.linalg.solve(H + 2 * torch.eye(4, dtype=DTYPE), outer)
    got = torch.cat([meta_net.weight.grad.squeeze(0), meta_net.bias.grad])
    torch.testing.assert_close(got, 2 * expected, rtol=1e-6, atol=1e-9)  # accumulated twice


def test_misuse_is_reported():
    with pytest.raises(TypeError, match="objective"):

        class NoObjective(ImplicitMetaGradientModule):
            def solve(self):
                return self

    with pytest.raises(TypeError, match="plain method"):

        class StaticSolve(ImplicitMetaGradientModule):
            def objective(self):
                return torch.zeros(())

            @staticmethod
            def solve():
                return None

    with pytest.raises(TypeError, match="linear_solve"):

        class BadSolver(ImplicitMetaGradientModule, linear_solve="cg"):
            def objective(self):
                return torch.zeros(())

    class NoMeta(ImplicitMetaGradientModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(2))

        def objective(self):
            return self.w.pow(2).sum()

        def solve(self):
            return self

    with pytest.raises(RuntimeError, match="no meta-parameters"):
        NoMeta().solve()


def test_optimality_unlike_the_parameters_is_reported():
    class WrongResidual(ProximalLogistic):
        def optimality(self, x, labels):
            return (self.w - self.theta_w,)  # one residual for two parameters

    theta = make_theta()
    inner = WrongResidual(*theta)
    inner.solve(X, LABELS)
    with pytest.raises(ValueError, match="structure of the solution"):
        meta_loss(inner.w, inner.b).backward()


def test_solve_without_grad_then_with_grad():
    theta = make_theta()
    inner = ProximalLogistic(*theta)
    with torch.no_grad():  # e.g. an evaluation pass: plain tensors come back, no graph
        inner.solve(X, LABELS)
    assert not inner.w.requires_grad
    inner.solve(X, LABELS)  # restarts from Parameters: the solver can differentiate again
    grads = torch.autograd.grad(meta_loss(inner.w, inner.b), theta)
    for got, unrolled in zip(grads, unrolled_meta_gradient()):
        torch.testing.assert_close(got, unrolled, rtol=1e-7, atol=1e-10)


def test_subclass_without_solve_cannot_be_instantiated():
    class NoSolve(ImplicitMetaGradientModule):
        def objective(self):
            return torch.zeros(())

    with pytest.raises(TypeError, match="abstract"):
        NoSolve()
    with pytest.raises(TypeError, match="must be a method"):
        class NotCallable(ImplicitMetaGradientModule):
            optimality = 0

            def solve(self):
                pass


def test_class_helpers_of_the_nn_module_path():
    from diffopt.diff.implicit.nn.module import (
        enable_implicit_gradients,
        make_optimality_from_objective,
    )

    class Prox(ImplicitMetaGradientModule):
        def __init__(self, theta):
            super().__init__()
            self.theta = theta
            self.phi = torch.nn.Parameter(torch.zeros(3, dtype=DTYPE))

        def objective(self):
            return (self.phi ** 3).sum() / 3 + (self.phi - self.theta).pow(2).sum()

        def solve(self):
            pass

    with pytest.raises(TypeError, match="already"):
        enable_implicit_gradients(Prox)
    theta = torch.tensor([1.0, 2.0, 3.0], dtype=DTYPE, requires_grad=True)
    inner = make_optimality_from_objective(Prox)(theta)
    # d/dphi [phi^3/3 + (phi - theta)^2] = phi^2 + 2 (phi - theta), at phi = 0: -2 theta
    (residual,) = inner.optimality()
    torch.testing.assert_close(residual, -2 * theta.detach())

    class OptimalityOnly(ImplicitMetaGradientModule):
        def optimality(self):
            return ()

        def solve(self):
            pass

    with pytest.raises(TypeError, match="objective"):
        make_optimality_from_objective(OptimalityOnly)


def test_derived_optimality_gives_the_same_meta_gradient():
    # A class whose optimality() was derived by make_optimality_from_objective solves to the
    # closed form phi* = (theta + x) / 2 of min |phi - theta|^2 + |phi - x|^2: dphi*/dtheta = I/2.
    from diffopt.diff.implicit.nn.module import make_optimality_from_objective

    class Mean(ImplicitMetaGradientModule, linear_solve=linear_solve.solve_cg(rtol=1e-12)):
        def __init__(self, theta):
            super().__init__()
            self.theta = theta
            self.phi = torch.nn.Parameter(torch.zeros(2, dtype=DTYPE))

        def objective(self, x):
            return (self.phi - self.theta).pow(2).sum() + (self.phi - x).pow(2).sum()

        def solve(self, x):
            with torch.no_grad():
                self.phi.copy_((self.theta + x) / 2)

    make_optimality_from_objective(Mean)
    theta = torch.tensor([1.0, -1.0], dtype=DTYPE, requires_grad=True)
    inner = Mean(theta)
    inner.solve(torch.tensor([3.0, 5.0], dtype=DTYPE))
    torch.testing.assert_close(inner.phi.detach(), torch.tensor([2.0, 2.0], dtype=DTYPE))
    (inner.phi * torch.tensor([1.0, 3.0], dtype=DTYPE)).sum().backward()
    torch.testing.assert_close(theta.grad, torch.tensor([0.5, 1.5], dtype=DTYPE))
