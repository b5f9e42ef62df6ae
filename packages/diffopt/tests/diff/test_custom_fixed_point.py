"""custom_fixed_point: hyper-gradients of fixed points against closed forms (linear maps) and
float64 central differences (a nonlinear map), with every forward method and several backward
linear solvers, on pytrees and module parameters."""

import pytest
import torch

from diffopt import fixed_point, linear_solve
from diffopt.diff.implicit import custom_fixed_point

DTYPE = torch.float64
N, P = 6, 3

_g = torch.Generator().manual_seed(0)
W = torch.randn(N, N, generator=_g, dtype=DTYPE)
W = 0.7 * W / torch.linalg.matrix_norm(W, 2)  # a non-symmetric contraction
U = torch.randn(N, P, generator=_g, dtype=DTYPE)
C = torch.randn(N, generator=_g, dtype=DTYPE)
TARGET = torch.randn(N, generator=_g, dtype=DTYPE)
THETA = torch.randn(P, generator=_g, dtype=DTYPE)
EYE = torch.eye(N, dtype=DTYPE)

BACKWARD_SOLVERS = {
    "normal_cg": linear_solve.solve_normal_cg(rtol=1e-14),
    "gmres": linear_solve.solve_gmres(rtol=1e-13),
    "gmres_restart_2": linear_solve.solve_gmres(rtol=1e-13, restart=2),
    "bicgstab": linear_solve.solve_bicgstab(rtol=1e-13),
    "lu": linear_solve.solve_lu(),
    "inv": linear_solve.solve_inv(),
}


def linear_map(z, theta, W):
    return W @ z + U @ theta + C


def forward(method):
    def solver(z0, theta, W):
        return fixed_point.solve(linear_map, z0, theta, W, method=method, tol=1e-14,
                                 max_iter=500).value

    return solver


@pytest.mark.parametrize("method", fixed_point.METHODS)
@pytest.mark.parametrize("solve", list(BACKWARD_SOLVERS))
def test_linear_fixed_point_hypergradient_equals_the_closed_form(method, solve):
    # z* = (I - W)^{-1} (U theta + C); L = |z* - t|^2 / 2, so with u = (I - W)^{-T} (z* - t):
    # dL/dtheta = U^T u and dL/dW = u z*^T.
    solver = custom_fixed_point(linear_map, argnums=(1, 2), solve=BACKWARD_SOLVERS[solve])(
        forward(method)
    )
    theta = THETA.clone().requires_grad_()
    w = W.clone().requires_grad_()
    z = solver(torch.zeros(N, dtype=DTYPE), theta, w)
    grad_theta, grad_w = torch.autograd.grad(0.5 * (z - TARGET).pow(2).sum(), (theta, w))

    z_star = torch.linalg.solve(EYE - W, U @ THETA + C)
    u = torch.linalg.solve((EYE - W).T, z_star - TARGET)
    torch.testing.assert_close(z.detach(), z_star, rtol=0, atol=1e-12)
    assert float((grad_theta - U.T @ u).abs().max()) < 1e-8 * max(1.0, float(u.abs().max()))
    assert float((grad_w - torch.outer(u, z_star)).abs().max()) < 1e-8 * max(
        1.0, float(u.abs().max()) * float(z_star.abs().max()))


def test_default_argnums_is_one_and_solve_defaults_to_normal_cg():
    solver = custom_fixed_point(linear_map)(forward("anderson"))
    theta = THETA.clone().requires_grad_()
    z = solver(torch.zeros(N, dtype=DTYPE), theta, W.clone().requires_grad_())
    (grad,) = torch.autograd.grad(z.sum(), theta)  # W is not differentiated
    expected = U.T @ torch.linalg.solve((EYE - W).T, torch.ones(N, dtype=DTYPE))
    torch.testing.assert_close(grad, expected, rtol=1e-5, atol=1e-6)  # the default rtol=1e-5


def tanh_layer(z, params, x):
    return torch.tanh(params["W"] @ z + params["U"] @ x + params["b"])


def solve_tanh(params, x):
    z0 = torch.zeros(N, dtype=DTYPE)
    return fixed_point.solve(tanh_layer, z0, params, x, tol=1e-14, max_iter=500).value


@pytest.mark.parametrize("method", fixed_point.METHODS)
def test_nonlinear_fixed_point_matches_central_differences(method):
    params = {"W": W.clone(), "U": U.clone(), "b": C.clone()}
    x = THETA.clone()
    weights = torch.linspace(-1, 2, N, dtype=DTYPE)

    @custom_fixed_point(tanh_layer, argnums=(1, 2), solve=linear_solve.solve_gmres(rtol=1e-13))
    def deq(z0, params, x):
        return fixed_point.solve(tanh_layer, z0, params, x, method=method, tol=1e-14,
                                 max_iter=500).value

    leaves = {k: v.clone().requires_grad_() for k, v in params.items()}
    x_var = x.clone().requires_grad_()
    z = deq(torch.zeros(N, dtype=DTYPE), leaves, x_var)
    grads = torch.autograd.grad((weights * z).sum(), (*leaves.values(), x_var))

    def objective(params, x):
        return float((weights * solve_tanh(params, x)).sum())

    eps = 1e-6
    for (name, value), grad in zip([*params.items(), ("x", x)], grads):
        numeric = torch.zeros_like(value)
        for i in range(value.numel()):
            shifted = []
            for sign in (1.0, -1.0):
                p = {k: v.clone() for k, v in params.items()}
                xx = x.clone()
                target = xx if name == "x" else p[name]
                target.view(-1)[i] += sign * eps
                shifted.append(objective(p, xx))
            numeric.view(-1)[i] = (shifted[0] - shifted[1]) / (2 * eps)
        torch.testing.assert_close(grad, numeric, rtol=1e-6, atol=1e-8, msg=name)


def test_pytree_solution_has_aux_and_keyword_arguments():
    # z = {'a': (2,), 'b': (2, 2)}: z_a = 0.5 tanh(z_b.sum(0)) + s * theta, z_b = 0.25 outer(z_a, 1).
    def f(z, theta, scale=1.0):
        return {"a": 0.5 * torch.tanh(z["b"].sum(0)) + scale * theta,
                "b": 0.25 * torch.outer(z["a"], torch.ones(2, dtype=DTYPE))}

    @custom_fixed_point(f, argnums=1, has_aux=True, solve=linear_solve.solve_lu())
    def solver(z0, theta, scale=1.0):
        result = fixed_point.solve(lambda z, t: f(z, t, scale), z0, theta, tol=1e-13)
        return result.value, result.iterations

    z0 = {"a": torch.zeros(2, dtype=DTYPE), "b": torch.zeros(2, 2, dtype=DTYPE)}
    theta = torch.tensor([0.3, -0.2], dtype=DTYPE, requires_grad=True)
    z, iterations = solver(z0, theta, scale=2.0)
    assert isinstance(iterations, int) and iterations > 0
    (grad,) = torch.autograd.grad(z["a"].sum() + z["b"].sum(), theta)

    def objective(t):
        value = fixed_point.solve(lambda z: f(z, t, 2.0), z0, tol=1e-14).value
        return float(value["a"].sum() + value["b"].sum())

    eps = 1e-6
    numeric = torch.tensor([(objective(theta.detach() + eps * e) -
                             objective(theta.detach() - eps * e)) / (2 * eps)
                            for e in torch.eye(2, dtype=DTYPE)], dtype=DTYPE)
    torch.testing.assert_close(grad, numeric, rtol=1e-6, atol=1e-8)


def test_module_parameters_as_the_differentiated_argument():
    layer = torch.nn.Linear(N, N, dtype=DTYPE)
    with torch.no_grad():
        layer.weight.mul_(0.5 / torch.linalg.matrix_norm(layer.weight, 2))
    x = torch.linspace(-1, 1, N, dtype=DTYPE)

    def f(z, params):
        return torch.tanh(torch.func.functional_call(layer, params, (z,)) + x)

    @custom_fixed_point(f, solve=linear_solve.solve_gmres(rtol=1e-12))
    def deq(z0, params):
        return fixed_point.solve(f, z0, params, tol=1e-13).value

    params = dict(layer.named_parameters())
    z = deq(torch.zeros(N, dtype=DTYPE), params)
    z.sum().backward()
    # Against backprop through enough unrolled iterations (contraction 0.5: 80 steps reach 1e-24).
    unrolled = torch.zeros(N, dtype=DTYPE)
    for _ in range(80):
        unrolled = f(unrolled, params)
    expected = torch.autograd.grad(unrolled.sum(), (layer.weight, layer.bias))
    torch.testing.assert_close(layer.weight.grad, expected[0])
    torch.testing.assert_close(layer.bias.grad, expected[1])


def test_bad_input_is_named():
    with pytest.raises(TypeError, match="fixed_point_fn must be callable"):
        custom_fixed_point("not a function")
    with pytest.raises(ValueError, match="argnums cannot include 0"):
        custom_fixed_point(linear_map, argnums=0)
    with pytest.raises(TypeError, match="solve must be a linear solver"):
        custom_fixed_point(linear_map, solve=3)

    @custom_fixed_point(lambda z, theta: z[:2] + theta.sum())
    def wrong_shape(z0, theta):
        return z0

    theta = THETA.clone().requires_grad_()
    z = wrong_shape(torch.zeros(N, dtype=DTYPE), theta)
    with pytest.raises(ValueError, match="fixed_point_fn must return tensors shaped like"):
        z.sum().backward()

    @custom_fixed_point(lambda z, theta: (z, z))
    def wrong_tree(z0, theta):
        return z0

    z = wrong_tree(torch.zeros(N, dtype=DTYPE), theta)
    with pytest.raises(ValueError, match="fixed_point_fn must return a pytree with the structure"):
        z.sum().backward()
