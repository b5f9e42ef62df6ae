"""TorchOpt tutorial code (implicit, zero-order) runs with ``import diffopt as torchopt``."""

import torch
import torch.nn.functional as F

import diffopt as torchopt

DTYPE = torch.float64


def test_imaml_tutorial_custom_root_with_functorch_grad():
    # TorchOpt's implicit-differentiation tutorial, with torch.func for the functional model.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    model = model.to(DTYPE)
    names = [name for name, _ in model.named_parameters()]

    def fmodel(params, x):
        return torch.func.functional_call(model, dict(zip(names, params)), (x,))

    x = torch.randn(32, 4, dtype=DTYPE)
    y = torch.randn(32, 1, dtype=DTYPE)
    meta_params = tuple(p.detach().clone().requires_grad_() for p in model.parameters())

    def imaml_objective(params, meta_params, data):
        x, y, fmodel = data
        y_pred = fmodel(params, x)
        regularization_loss = 0
        for p1, p2 in zip(params, meta_params):
            regularization_loss += 0.5 * torch.sum(torch.square(p1 - p2))
        return F.mse_loss(y_pred, y) + regularization_loss

    @torchopt.diff.implicit.custom_root(
        torch.func.grad(imaml_objective, argnums=0),  # optimality function
        argnums=1,
        solve=torchopt.linear_solve.solve_normal_cg(maxiter=50, atol=0.0, rtol=1e-12),
    )
    def inner_solver(params, meta_params, data):
        optimizer = torchopt.sgd(lr=0.2)
        opt_state = optimizer.init(params)
        with torch.enable_grad():
            for _ in range(150):  # the proximal term makes each step contract by 0.8
                loss = imaml_objective(params, meta_params, data)
                grads = torch.autograd.grad(loss, params)
                updates, opt_state = optimizer.update(grads, opt_state, inplace=False)
                params = torchopt.apply_updates(params, updates, inplace=False)
        return params

    init = tuple(p.detach().clone().requires_grad_() for p in meta_params)
    optimal = inner_solver(init, meta_params, (x, y, fmodel))
    outer = fmodel(optimal, x).pow(2).mean()
    implicit = torch.autograd.grad(outer, meta_params)

    # Reference: differentiate through the same 150 SGD steps (converged).
    params = meta_params
    for _ in range(150):
        grads = torch.autograd.grad(
            imaml_objective(params, meta_params, (x, y, fmodel)), params, create_graph=True
        )
        params = tuple(p - 0.2 * g for p, g in zip(params, grads))
    unrolled = torch.autograd.grad(fmodel(params, x).pow(2).mean(), meta_params)
    for a, b in zip(implicit, unrolled):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-9)


def test_zero_order_tutorial_decorator():
    # TorchOpt's zero-order tutorial: a tuple of parameters, a distribution object, argnums=0.
    torch.manual_seed(0)
    w_true = torch.tensor([[1.0], [-2.0], [0.5]], dtype=DTYPE)
    x = torch.randn(64, 3, dtype=DTYPE)
    y = x @ w_true

    def fn(params, x):
        (w,) = params
        return x @ w

    distribution = torch.distributions.Normal(loc=0, scale=1)

    @torchopt.diff.zero_order(
        distribution=distribution, method="antithetic", argnums=0, num_samples=20, sigma=0.01
    )
    def forward_process(params, fn, x, y):
        y_pred = fn(params, x)
        return F.mse_loss(y_pred, y)

    params = (torch.zeros(3, 1, dtype=DTYPE, requires_grad=True),)
    optimizer = torchopt.Adam(params, lr=0.05)
    for _ in range(200):
        loss = forward_process(params, fn, x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    torch.testing.assert_close(params[0].detach(), w_true, rtol=0, atol=0.05)


def test_imaml_tutorial_module_api():
    # TorchOpt's ImplicitMetaGradientModule tutorial class, verbatim in spirit.
    class InnerNet(
        torchopt.nn.ImplicitMetaGradientModule,
        linear_solve=torchopt.linear_solve.solve_normal_cg(maxiter=30, atol=0.0),
    ):
        def __init__(self, meta_net, n_inner_iter, reg_param):
            super().__init__()
            self.meta_net = meta_net
            self.net = torchopt.module_clone(meta_net, by="deepcopy", detach_buffers=True)
            self.n_inner_iter = n_inner_iter
            self.reg_param = reg_param

        def forward(self, x):
            return self.net(x)

        def objective(self, x, y):
            loss = F.mse_loss(self(x), y)
            regularization_loss = 0
            for p1, p2 in zip(self.parameters(), self.meta_parameters()):
                regularization_loss += 0.5 * self.reg_param * torch.sum(torch.square(p1 - p2))
            return loss + regularization_loss

        def solve(self, x, y):
            params = tuple(self.parameters())
            inner_optim = torchopt.SGD(params, lr=0.2)
            with torch.enable_grad():
                for _ in range(self.n_inner_iter):
                    loss = self.objective(x, y)
                    inner_optim.zero_grad()
                    loss.backward(inputs=params)
                    inner_optim.step()
            return self

    torch.manual_seed(0)
    meta_net = torch.nn.Linear(3, 1).to(DTYPE)
    x = torch.randn(20, 3, dtype=DTYPE)
    y = torch.randn(20, 1, dtype=DTYPE)
    inner = InnerNet(meta_net, n_inner_iter=200, reg_param=1.0)
    inner.solve(x, y)
    F.mse_loss(inner(x), torch.zeros_like(y)).backward()

    # Closed form: the inner problem is quadratic in q = [W, b]; q* = (H + I)^-1 (c + theta) with
    # H = 2 Xa^T Xa / n, so d q*/d theta = (H + I)^-1.
    Xa = torch.cat([x, torch.ones(20, 1, dtype=DTYPE)], dim=1)
    H = 2 * Xa.T @ Xa / 20
    q = torch.cat([inner.net.weight.detach().reshape(-1), inner.net.bias.detach()])
    outer = 2 * Xa.T @ (Xa @ q) / 20
    expected = torch.linalg.solve(H + torch.eye(4, dtype=DTYPE), outer)
    got = torch.cat([meta_net.weight.grad.reshape(-1), meta_net.bias.grad])
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-9)


def test_zero_order_tutorial_module_api():
    # TorchOpt's ZeroOrderGradientModule tutorial class, trained with torchopt.Adam.
    class Net(torchopt.nn.ZeroOrderGradientModule, method="forward", num_samples=20, sigma=0.01):
        def __init__(self, dim):
            super().__init__()
            self.fc = torch.nn.Linear(dim, 1).to(DTYPE)
            self.distribution = torch.distributions.Normal(
                loc=torch.tensor(0.0, dtype=DTYPE), scale=torch.tensor(1.0, dtype=DTYPE)
            )

        def forward(self, x, y):
            return F.mse_loss(self.fc(x), y)

        def sample(self, sample_shape=torch.Size()):  # noqa: B008
            return self.distribution.sample(sample_shape)

    torch.manual_seed(0)
    x = torch.randn(64, 3, dtype=DTYPE)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5]], dtype=DTYPE) + 0.3
    net = Net(3)
    optimizer = torchopt.Adam(net.parameters(), lr=0.05)
    first = net(x, y).item()
    for _ in range(200):
        loss = net(x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert net(x, y).item() < 1e-2 * first
