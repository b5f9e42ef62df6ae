"""TorchOpt-style user code runs unchanged under ``import diffopt as torchopt``.

Each test is written the way TorchOpt's README and tutorials write it (only the import differs)
and checks a real answer: a hand-unrolled Adam reference for MAML, the closed-form ridge
solution for ``custom_root``, the analytic gradient for zero-order ES.
"""

import math

import pytest

torch = pytest.importorskip("torch")
torchopt = pytest.importorskip("diffopt")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

DTYPE = torch.float64


# ---------------------------------------------------------------- MAML with MetaAdam


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(1, 16)
        self.fc2 = nn.Linear(16, 1)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


def sine_task(generator):
    amplitude = 0.5 + 4.5 * torch.rand((), generator=generator, dtype=DTYPE)
    phase = math.pi * torch.rand((), generator=generator, dtype=DTYPE)
    x = 10 * torch.rand(20, 1, generator=generator, dtype=DTYPE) - 5
    y = amplitude * torch.sin(x + phase)
    return x[:10], y[:10], x[10:], y[10:]


def maml_meta_gradient(net, inner_opt, task, inner_steps):
    """TorchOpt's MAML tutorial loop body: adapt, outer loss, backward, restore."""
    x_spt, y_spt, x_qry, y_qry = task
    net_state = torchopt.extract_state_dict(net)
    optim_state = torchopt.extract_state_dict(inner_opt)
    for _ in range(inner_steps):
        inner_loss = F.mse_loss(net(x_spt), y_spt)
        inner_opt.step(inner_loss)
    outer_loss = F.mse_loss(net(x_qry), y_qry)
    outer_loss.backward()
    torchopt.recover_state_dict(net, net_state)
    torchopt.recover_state_dict(inner_opt, optim_state)
    return outer_loss.detach()


def reference_maml_meta_gradient(net, task, inner_steps, lr):
    """The same meta-gradient with Adam written out by hand (TorchOpt defaults, eps_root=0)."""
    x_spt, y_spt, x_qry, y_qry = task
    names = [name for name, _ in net.named_parameters()]
    leaves = [p.detach().clone().requires_grad_() for p in net.parameters()]
    params = list(leaves)
    mu = [torch.zeros_like(p) for p in params]
    nu = [torch.zeros_like(p) for p in params]
    b1, b2, eps = 0.9, 0.999, 1e-8
    for t in range(1, inner_steps + 1):
        pred = torch.func.functional_call(net, dict(zip(names, params)), (x_spt,))
        grads = torch.autograd.grad(F.mse_loss(pred, y_spt), params, create_graph=True)
        mu = [b1 * m + (1 - b1) * g for m, g in zip(mu, grads)]
        nu = [b2 * v + (1 - b2) * g * g for v, g in zip(nu, grads)]
        params = [
            p - lr * (m / (1 - b1**t)) / (torch.sqrt(v / (1 - b2**t)) + eps)
            for p, m, v in zip(params, mu, nu)
        ]
    pred = torch.func.functional_call(net, dict(zip(names, params)), (x_qry,))
    return torch.autograd.grad(F.mse_loss(pred, y_qry), leaves)


def test_maml_meta_adam_matches_hand_unrolled_adam():
    torch.manual_seed(0)
    net = Net().to(DTYPE)
    inner_opt = torchopt.MetaAdam(net, lr=0.05)
    task = sine_task(torch.Generator().manual_seed(1))
    expected = reference_maml_meta_gradient(net, task, inner_steps=3, lr=0.05)

    maml_meta_gradient(net, inner_opt, task, inner_steps=3)

    for p, g in zip(net.parameters(), expected):
        assert p.is_leaf  # recover_state_dict put the original parameters back
        torch.testing.assert_close(p.grad, g, rtol=1e-9, atol=1e-12)


def test_maml_meta_training_lowers_the_adapted_query_loss():
    torch.manual_seed(0)
    net = Net().to(DTYPE)
    meta_opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    inner_opt = torchopt.MetaAdam(net, lr=0.05)
    held_out = [sine_task(torch.Generator().manual_seed(1000 + k)) for k in range(8)]

    def adapted_loss():
        total = 0.0
        for task in held_out:
            total += maml_meta_gradient(net, inner_opt, task, inner_steps=2).item()
        net.zero_grad()
        return total / len(held_out)

    before = adapted_loss()
    generator = torch.Generator().manual_seed(0)
    for _ in range(60):
        meta_opt.zero_grad()
        for _ in range(4):
            maml_meta_gradient(net, inner_opt, sine_task(generator), inner_steps=2)
        assert all(torch.isfinite(p.grad).all() for p in net.parameters())
        meta_opt.step()
    assert adapted_loss() < 0.8 * before


# ---------------------------------------------------------------- implicit custom_root


def test_custom_root_ridge_regression_matches_the_closed_form():
    generator = torch.Generator().manual_seed(0)
    x_train = torch.randn(40, 4, generator=generator, dtype=DTYPE)
    y_train = torch.randn(40, generator=generator, dtype=DTYPE)
    x_val = torch.randn(20, 4, generator=generator, dtype=DTYPE)
    y_val = torch.randn(20, generator=generator, dtype=DTYPE)

    def inner_objective(params, l2reg, data):
        x, y = data
        return 0.5 * F.mse_loss(x @ params, y, reduction="sum") + 0.5 * l2reg * params.pow(2).sum()

    def optimality_fn(params, l2reg, data):
        with torch.enable_grad():
            params = params.detach().requires_grad_() if not params.requires_grad else params
            loss = inner_objective(params, l2reg, data)
            (grad,) = torch.autograd.grad(loss, params, create_graph=True)
        return grad

    @torchopt.diff.implicit.custom_root(
        optimality_fn, argnums=1, solve=torchopt.linear_solve.solve_cg(maxiter=100, rtol=1e-12)
    )
    def ridge_solver(params, l2reg, data):
        # Any solver: here plain gradient descent with torchopt's PyTorch-style SGD.
        params = params.detach().clone().requires_grad_()
        optimizer = torchopt.SGD([params], lr=0.01)
        for _ in range(1000):
            optimizer.zero_grad()
            with torch.enable_grad():
                inner_objective(params, l2reg.detach(), data).backward()
            optimizer.step()
        return params.detach()

    l2reg = torch.tensor(2.0, dtype=DTYPE, requires_grad=True)
    init = torch.zeros(4, dtype=DTYPE)
    params = ridge_solver(init, l2reg, (x_train, y_train))
    outer_loss = F.mse_loss(x_val @ params, y_val)
    (meta_grad,) = torch.autograd.grad(outer_loss, l2reg)

    # Closed form: w(l) = (X^T X + l I)^-1 X^T y, differentiated by autograd.
    l2reg_cf = l2reg.detach().clone().requires_grad_()
    hessian = x_train.T @ x_train + l2reg_cf * torch.eye(4, dtype=DTYPE)
    w_cf = torch.linalg.solve(hessian, x_train.T @ y_train)
    (meta_grad_cf,) = torch.autograd.grad(F.mse_loss(x_val @ w_cf, y_val), l2reg_cf)

    torch.testing.assert_close(params, w_cf.detach(), rtol=1e-8, atol=1e-10)
    torch.testing.assert_close(meta_grad, meta_grad_cf, rtol=1e-6, atol=1e-10)
    assert init.eq(0).all()  # the caller's initial guess is untouched


# ---------------------------------------------------------------- zero-order ES


@pytest.mark.parametrize("method", ["naive", "forward", "antithetic"])
def test_zero_order_es_approaches_the_true_gradient(method):
    a = torch.tensor([[3.0, 0.5, 0.0], [0.5, 2.0, 0.3], [0.0, 0.3, 1.0]], dtype=DTYPE)
    b = torch.tensor([1.0, -2.0, 0.5], dtype=DTYPE)
    distribution = torch.distributions.Normal(loc=0, scale=1)

    def make(num_samples):
        @torchopt.diff.zero_order(
            distribution=distribution, method=method, argnums=0, num_samples=num_samples,
            sigma=1.0,  # a quadratic's Gaussian smoothing has the same gradient
        )
        def quadratic(theta, a, b):
            return 0.5 * theta @ a @ theta + b @ theta

        return quadratic

    theta0 = torch.tensor([0.5, -1.0, 2.0], dtype=DTYPE)
    true_grad = a @ theta0 + b

    def error(num_samples, seed):
        torch.manual_seed(seed)
        theta = theta0.clone().requires_grad_()
        make(num_samples)(theta, a, b).backward()
        return (theta.grad - true_grad).norm() / true_grad.norm()

    few = sum(error(10, seed) for seed in range(8)) / 8
    many = error(20000, 0)
    assert many < 0.1, f"{method}: relative error {many:.3f} with 20000 samples"
    assert many < few / 3, f"{method}: no convergence ({few:.3f} -> {many:.3f})"


def test_zero_order_es_descends_a_quadratic():
    a = torch.diag(torch.tensor([1.0, 2.0, 4.0]))
    distribution = torch.distributions.Normal(loc=0, scale=1)

    @torchopt.diff.zero_order(distribution, method="antithetic", argnums=0, num_samples=200,
                              sigma=0.05)
    def loss_fn(theta):
        return 0.5 * theta @ a @ theta

    torch.manual_seed(0)
    theta = torch.tensor([1.0, -1.0, 1.0], requires_grad=True)
    optimizer = torchopt.Adam([theta], lr=0.05)
    first = loss_fn(theta).item()
    for _ in range(100):
        loss = loss_fn(theta)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss_fn(theta).item() < 0.05 * first
