"""diffopt on a GPU: the meta-gradients on CUDA equal the CPU ones (float64), through the plain
and the accelerated Adam (fused_optim's CUDA kernel), the functional API and implicit
differentiation. Skipped without a GPU (CI has none; ci/gpu_check.sh runs these where one is)."""

import pytest
import torch
import torch.nn.functional as F
from helpers import regression_task, small_mlp

import diffopt
from diffopt import linear_solve
from diffopt.diff.implicit import custom_root

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _maml_meta_gradient(device, make_optimizer, steps=3):
    net = small_mlp(seed=3, sizes=(2, 16, 16, 1)).to(device)
    x_s, y_s, x_q, y_q = (t.to(device) for t in regression_task(seed=4))
    theta0 = list(net.parameters())
    optimizer = make_optimizer(net)
    for _ in range(steps):
        optimizer.step(F.mse_loss(net(x_s), y_s))
    outer = F.mse_loss(net(x_q), y_q)
    return [g.cpu() for g in torch.autograd.grad(outer, theta0)]


@pytest.mark.parametrize("make_optimizer", [
    pytest.param(lambda m: diffopt.MetaSGD(m, lr=0.2, momentum=0.9), id="sgd-momentum"),
    pytest.param(lambda m: diffopt.MetaAdam(m, lr=0.05), id="adam"),
    pytest.param(lambda m: diffopt.MetaAdam(m, lr=0.05, use_accelerated_op=True), id="adam-accelerated"),
    pytest.param(lambda m: diffopt.MetaAdamW(m, lr=0.05, weight_decay=0.1, use_accelerated_op=True),
                 id="adamw-accelerated"),
    pytest.param(lambda m: diffopt.MetaRMSProp(m, lr=0.01, centered=True), id="rmsprop-centered"),
])
def test_maml_meta_gradient_on_cuda_matches_cpu(make_optimizer):
    on_cpu = _maml_meta_gradient("cpu", make_optimizer)
    on_gpu = _maml_meta_gradient("cuda", make_optimizer)
    for a, b in zip(on_cpu, on_gpu):
        assert torch.isfinite(b).all()
        torch.testing.assert_close(b, a, rtol=1e-9, atol=1e-12)


def test_accelerated_op_is_available_on_cuda():
    assert diffopt.accelerated_op_available("cuda")


def test_functional_adam_on_cuda_matches_cpu():
    def run(device):
        generator = torch.Generator().manual_seed(0)  # drawn on the CPU: the same start on both
        params = {"w": torch.randn(5, 3, generator=generator, dtype=torch.float64).to(device).requires_grad_()}
        optimizer = diffopt.adam(lr=0.1, moment_requires_grad=True, use_accelerated_op=True)
        state = optimizer.init(params)
        x = torch.linspace(-1, 1, 3, dtype=torch.float64, device=device)
        current = params
        for _ in range(4):
            loss = (current["w"] @ x).sin().sum()
            grads = dict(zip(current, torch.autograd.grad(loss, list(current.values()), create_graph=True)))
            updates, state = optimizer.update(grads, state, inplace=False)
            current = diffopt.apply_updates(current, updates, inplace=False)
        (meta,) = torch.autograd.grad(current["w"].pow(2).sum(), params["w"])
        return meta.cpu()

    torch.testing.assert_close(run("cuda"), run("cpu"), rtol=1e-9, atol=1e-12)


def test_custom_root_hypergradient_on_cuda():
    # Ridge regression: dL/dlam against the closed form, with the data on the GPU.
    generator = torch.Generator().manual_seed(0)
    X = torch.randn(20, 4, generator=generator, dtype=torch.float64).cuda()
    y = torch.randn(20, generator=generator, dtype=torch.float64).cuda()

    def optimality(w, lam):
        return X.T @ (X @ w - y) + lam * w

    @custom_root(optimality, argnums=1, solve=linear_solve.solve_cg(rtol=1e-12))
    def solve_ridge(w0, lam):
        H = X.T @ X + lam.detach() * torch.eye(4, dtype=X.dtype, device=X.device)
        return torch.linalg.solve(H, X.T @ y)

    lam = torch.tensor(0.7, dtype=torch.float64, device="cuda", requires_grad=True)
    w = solve_ridge(torch.zeros(4, dtype=torch.float64, device="cuda"), lam)
    (grad,) = torch.autograd.grad(0.5 * w.pow(2).sum(), lam)
    H = X.T @ X + 0.7 * torch.eye(4, dtype=X.dtype, device=X.device)
    expected = -(w.detach() @ torch.linalg.solve(H, w.detach()))  # dw/dlam = -H^{-1} w
    torch.testing.assert_close(grad, expected, rtol=1e-8, atol=0)


def test_custom_fixed_point_with_anderson_and_gmres_on_cuda_matches_cpu():
    # A tanh equilibrium layer: the forward (Anderson) and backward (GMRES) solves on the GPU.
    def gradients(device):
        generator = torch.Generator().manual_seed(1)
        W = torch.randn(8, 8, generator=generator, dtype=torch.float64)
        W = (0.5 * W / torch.linalg.matrix_norm(W, 2)).to(device).requires_grad_()
        x = torch.randn(8, generator=generator, dtype=torch.float64).to(device).requires_grad_()

        def f(z, W, x):
            return torch.tanh(W @ z + x)

        @diffopt.implicit.custom_fixed_point(f, argnums=(1, 2),
                                             solve=linear_solve.solve_gmres(rtol=1e-12))
        def deq(z0, W, x):
            return diffopt.fixed_point.solve(f, z0, W, x, tol=1e-13).value

        z = deq(torch.zeros(8, dtype=torch.float64, device=device), W, x)
        assert z.device.type == torch.device(device).type
        return [g.cpu() for g in torch.autograd.grad(z.sum(), (W, x))]

    for a, b in zip(gradients("cpu"), gradients("cuda")):
        torch.testing.assert_close(b, a, rtol=1e-9, atol=1e-12)
