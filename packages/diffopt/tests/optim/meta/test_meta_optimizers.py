"""Meta-gradients of every meta-optimizer (MAML on a small MLP, float64).

Each is checked against (1) the same MAML loop unrolled by hand with the pure-PyTorch update
rules of ``_reference`` and ``torch.func.functional_call``, and (2) central finite differences of
diffopt's own outer loss.
"""

import _reference as ref
import pytest
import torch
import torch.nn.functional as F
from helpers import central_differences, regression_task, small_mlp
from torch.func import functional_call

import diffopt

# (meta-optimizer class, its kwargs, reference factory, the reference's kwargs)
CASES = {
    "sgd": (diffopt.MetaSGD, dict(lr=0.3), ref.sgd_reference, dict(lr=0.3)),
    "sgd-momentum": (diffopt.MetaSGD, dict(lr=0.2, momentum=0.9, weight_decay=0.1),
                     ref.sgd_reference, dict(lr=0.2, momentum=0.9, weight_decay=0.1)),
    "sgd-nesterov": (diffopt.MetaSGD, dict(lr=0.2, momentum=0.5, nesterov=True),
                     ref.sgd_reference, dict(lr=0.2, momentum=0.5, nesterov=True)),
    "adam": (diffopt.MetaAdam, dict(lr=0.05), ref.adam_reference, dict(lr=0.05)),
    "adam-wd": (diffopt.MetaAdam, dict(lr=0.05, weight_decay=0.1, betas=(0.8, 0.9)),
                ref.adam_reference, dict(lr=0.05, weight_decay=0.1, betas=(0.8, 0.9))),
    "adamw": (diffopt.MetaAdamW, dict(lr=0.05, weight_decay=0.2), ref.adamw_reference,
              dict(lr=0.05, weight_decay=0.2)),
    "rmsprop": (diffopt.MetaRMSProp, dict(lr=0.01), ref.rmsprop_reference, dict(lr=0.01)),
    "rmsprop-centered": (diffopt.MetaRMSprop, dict(lr=0.01, centered=True, momentum=0.5),
                         ref.rmsprop_reference, dict(lr=0.01, centered=True, momentum=0.5)),
    "adagrad": (diffopt.MetaAdaGrad, dict(lr=0.1, lr_decay=0.1), ref.adagrad_reference,
                dict(lr=0.1, lr_decay=0.1)),
    "adadelta": (diffopt.MetaAdaDelta, dict(lr=1.0, rho=0.5), ref.adadelta_reference,
                 dict(lr=1.0, rho=0.5)),
    "adamax": (diffopt.MetaAdaMax, dict(lr=0.05), ref.adamax_reference, dict(lr=0.05)),
    "radam": (diffopt.MetaRAdam, dict(lr=0.05, betas=(0.9, 0.9)), ref.radam_reference,
              dict(lr=0.05, betas=(0.9, 0.9))),
    "lion": (diffopt.MetaLion, dict(lr=0.01, weight_decay=0.3), ref.lion_reference, dict(lr=0.01, weight_decay=0.3)),
    "adan": (diffopt.MetaAdan, dict(lr=0.05, weight_decay=0.1), ref.adan_reference, dict(lr=0.05, weight_decay=0.1)),
    "adan-no-prox": (diffopt.MetaAdan, dict(lr=0.05, weight_decay=0.1, no_prox=True, betas=(0.9, 0.8, 0.95)),
                     ref.adan_reference, dict(lr=0.05, weight_decay=0.1, no_prox=True, betas=(0.9, 0.8, 0.95))),
    "nadam": (diffopt.MetaNAdam, dict(lr=0.05), ref.nadam_reference, dict(lr=0.05)),
    "nadam-wd": (diffopt.MetaNAdam, dict(lr=0.05, weight_decay=0.1, momentum_decay=6e-3, betas=(0.8, 0.9)),
                 ref.nadam_reference, dict(lr=0.05, weight_decay=0.1, momentum_decay=6e-3, betas=(0.8, 0.9))),
    "nadamw": (diffopt.MetaNAdam, dict(lr=0.05, weight_decay=0.2, decoupled_weight_decay=True),
               ref.nadam_reference, dict(lr=0.05, weight_decay=0.2, decoupled=True)),
    "adafactor": (diffopt.MetaAdafactor, dict(lr=0.05), ref.adafactor_reference, dict(lr=0.05)),
    "adafactor-wd": (diffopt.MetaAdafactor, dict(lr=0.05, weight_decay=0.1, beta2_decay=-1.0, d=1.5, eps=(1e-6, 1e-2)),
                     ref.adafactor_reference,
                     dict(lr=0.05, weight_decay=0.1, beta2_decay=-1.0, d=1.5, eps=(1e-6, 1e-2))),
    "rprop": (diffopt.MetaRprop, dict(lr=0.01, etas=(0.4, 1.5)), ref.rprop_reference,
              dict(lr=0.01, etas=(0.4, 1.5))),
    "asgd": (diffopt.MetaASGD, dict(lr=0.1, lambd=0.1, t0=1, weight_decay=0.05), ref.asgd_reference,
             dict(lr=0.1, lambd=0.1, t0=1, weight_decay=0.05)),
}


def _fused_available():
    return diffopt.accelerated_op_available("cpu")


def _diffopt_outer_loss(net, make_opt, task, steps):
    x_s, y_s, x_q, y_q = task
    saved = diffopt.extract_state_dict(net)
    opt = make_opt(net)
    for _ in range(steps):
        opt.step(F.mse_loss(net(x_s), y_s))
    loss = F.mse_loss(net(x_q), y_q)
    diffopt.recover_state_dict(net, saved)
    return loss


def _reference_outer_loss(net, params, reference, task, steps):
    x_s, y_s, x_q, y_q = task
    names = [name for name, _ in net.named_parameters()]
    init, step = reference
    state = init(params)
    for _ in range(steps):
        inner = F.mse_loss(functional_call(net, dict(zip(names, params)), (x_s,)), y_s)
        grads = torch.autograd.grad(inner, params, create_graph=True)
        params, state = step(params, grads, state)
    return F.mse_loss(functional_call(net, dict(zip(names, params)), (x_q,)), y_q)


def _check_case(case, steps, accelerated=False):
    cls, kwargs, reference, ref_kwargs = CASES[case]
    if accelerated:
        kwargs = dict(kwargs, use_accelerated_op=True)
    net = small_mlp(seed=3)
    task = regression_task(seed=4)
    theta0 = list(net.parameters())

    outer = _diffopt_outer_loss(net, lambda m: cls(m, **kwargs), task, steps)
    ours = torch.autograd.grad(outer, theta0)

    expected_loss = _reference_outer_loss(net, theta0, reference(**ref_kwargs), task, steps)
    expected = torch.autograd.grad(expected_loss, theta0)
    torch.testing.assert_close(outer, expected_loss, rtol=1e-10, atol=1e-12)
    for o, e in zip(ours, expected):
        torch.testing.assert_close(o, e, rtol=1e-8, atol=1e-10)

    def value():
        return _diffopt_outer_loss(net, lambda m: cls(m, **kwargs), task, steps).item()

    numeric = central_differences(value, theta0, h=1e-6)
    for o, n in zip(ours, numeric):
        torch.testing.assert_close(o, n, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("steps", [1, 2, 5])
@pytest.mark.parametrize("case", sorted(CASES))
def test_meta_gradient_matches_reference_and_finite_differences(case, steps):
    _check_case(case, steps)


def test_radam_rectified_phase():
    # With b2 = 0.9 the rectified branch starts at step 6.
    _check_case("radam", steps=7)


@pytest.mark.parametrize("steps", [1, 3, 5])
@pytest.mark.parametrize("case", ["adam", "adam-wd", "adamw", "nadam", "nadam-wd", "nadamw", "rprop", "asgd",
                                  "lion", "adan", "adan-no-prox", "adafactor", "adafactor-wd"])
def test_accelerated_meta_gradient(case, steps):
    if not _fused_available():
        pytest.skip("fused-optim is not installed")
    _check_case(case, steps, accelerated=True)


@pytest.mark.parametrize("cls", [diffopt.MetaAdam, diffopt.MetaAdamW, diffopt.MetaNAdam, diffopt.MetaRprop,
                                 diffopt.MetaASGD, diffopt.MetaLion, diffopt.MetaAdan, diffopt.MetaAdafactor])
def test_accelerated_equals_plain(cls):
    if not _fused_available():
        pytest.skip("fused-optim is not installed")
    task = regression_task(seed=7)
    results = []
    for accelerated in (False, True):
        net = small_mlp(seed=5)
        theta0 = list(net.parameters())
        loss = _diffopt_outer_loss(
            net, lambda m, a=accelerated: cls(m, lr=0.05, use_accelerated_op=a), task, 3)
        results.append((loss, torch.autograd.grad(loss, theta0)))
    torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-12, atol=1e-14)
    for a, b in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def _dead_relu_net():
    net = small_mlp(seed=11, activation=torch.nn.ReLU, sizes=(2, 6, 1))
    with torch.no_grad():
        net[0].bias[:3] = -50.0  # three hidden units never fire: exactly-zero gradients
    net.register_parameter("unused", torch.nn.Parameter(torch.randn(3, dtype=torch.float64)))
    return net


@pytest.mark.parametrize("cls", [diffopt.MetaAdam, diffopt.MetaAdamW, diffopt.MetaRMSProp,
                                 diffopt.MetaAdaGrad, diffopt.MetaRAdam])
def test_zero_gradient_entries_give_exact_finite_meta_gradients(cls):
    net = _dead_relu_net()
    task = regression_task(seed=12)
    theta0 = list(net.parameters())
    kwargs = dict(lr=0.05)
    if cls is diffopt.MetaRAdam:
        kwargs["betas"] = (0.9, 0.9)
    outer = _diffopt_outer_loss(net, lambda m: cls(m, **kwargs), task, 7)
    ours = torch.autograd.grad(outer, theta0, allow_unused=True)
    ours = [torch.zeros_like(p) if g is None else g for p, g in zip(theta0, ours)]
    assert all(torch.isfinite(g).all() for g in ours)

    def value():
        return _diffopt_outer_loss(net, lambda m: cls(m, **kwargs), task, 7).item()

    numeric = central_differences(value, theta0, h=1e-6)
    for o, n in zip(ours, numeric):
        torch.testing.assert_close(o, n, rtol=1e-5, atol=1e-7)


def test_plain_sqrt_reference_is_nan_where_ours_is_finite():
    """The failure mode the safe square root exists for (TorchOpt's plain Adam has it)."""
    net = _dead_relu_net()
    del net._parameters["unused"]
    task = regression_task(seed=12)
    theta0 = list(net.parameters())
    naive = _reference_outer_loss(net, theta0, ref.adam_reference(lr=0.05), task, 2)
    naive_grads = torch.autograd.grad(naive, theta0)
    assert any(torch.isnan(g).any() for g in naive_grads)
    ours = torch.autograd.grad(
        _diffopt_outer_loss(net, lambda m: diffopt.MetaAdam(m, lr=0.05), task, 2), theta0)
    assert all(torch.isfinite(g).all() for g in ours)


def test_meta_learned_learning_rate():
    net = small_mlp(seed=2)
    task = regression_task(seed=3)
    lr = torch.tensor(0.2, dtype=torch.float64, requires_grad=True)
    outer = _diffopt_outer_loss(net, lambda m: diffopt.MetaSGD(m, lr=lr, momentum=0.5), task, 3)
    (ours,) = torch.autograd.grad(outer, lr)

    def value():
        return _diffopt_outer_loss(
            net, lambda m: diffopt.MetaSGD(m, lr=lr.detach(), momentum=0.5), task, 3).item()

    (numeric,) = central_differences(value, [lr])
    torch.testing.assert_close(ours, numeric, rtol=1e-6, atol=1e-9)


def test_func_optimizer_matches_meta_optimizer():
    net = small_mlp(seed=8)
    task = regression_task(seed=9)
    x_s, y_s, x_q, y_q = task
    theta0 = list(net.parameters())
    meta = torch.autograd.grad(
        _diffopt_outer_loss(net, lambda m: diffopt.MetaAdam(m, lr=0.05), task, 3), theta0)

    names = [n for n, _ in net.named_parameters()]
    params = dict(zip(names, theta0))
    opt = diffopt.FuncOptimizer(diffopt.adam(0.05, moment_requires_grad=True))
    for _ in range(3):
        params = opt.step(F.mse_loss(functional_call(net, params, (x_s,)), y_s), params)
    outer = F.mse_loss(functional_call(net, params, (x_q,)), y_q)
    func = torch.autograd.grad(outer, theta0)
    for a, b in zip(meta, func):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)
