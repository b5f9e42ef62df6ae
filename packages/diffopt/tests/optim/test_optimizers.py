"""Every PyTorch-style optimizer against its torch.optim twin, step by step."""

import pytest
import torch
from helpers import small_mlp

import diffopt
import fused_optim

# (diffopt class, torch class, kwargs shared by both)
CASES = [
    (diffopt.SGD, torch.optim.SGD, dict(lr=0.1)),
    (diffopt.SGD, torch.optim.SGD, dict(lr=0.1, momentum=0.9, weight_decay=0.01)),
    (diffopt.SGD, torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.3)),
    (diffopt.SGD, torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, maximize=True)),
    (diffopt.Adam, torch.optim.Adam, dict(lr=0.01)),
    (diffopt.Adam, torch.optim.Adam, dict(lr=0.01, betas=(0.8, 0.99), eps=1e-6,
                                          weight_decay=0.1, maximize=True)),
    (diffopt.AdamW, torch.optim.AdamW, dict(lr=0.01)),
    (diffopt.AdamW, torch.optim.AdamW, dict(lr=0.01, weight_decay=0.3, betas=(0.5, 0.9))),
    (diffopt.RMSProp, torch.optim.RMSprop, dict(lr=0.01)),
    (diffopt.RMSprop, torch.optim.RMSprop, dict(lr=0.01, momentum=0.5, centered=True,
                                                weight_decay=0.1)),
    (diffopt.AdaGrad, torch.optim.Adagrad, dict(lr=0.1)),
    (diffopt.Adagrad, torch.optim.Adagrad, dict(lr=0.1, lr_decay=0.05, weight_decay=0.1,
                                                initial_accumulator_value=0.2)),
    (diffopt.AdaDelta, torch.optim.Adadelta, dict(lr=1.0)),
    (diffopt.Adadelta, torch.optim.Adadelta, dict(lr=0.5, rho=0.8, weight_decay=0.1)),
    (diffopt.AdaMax, torch.optim.Adamax, dict(lr=0.01)),
    (diffopt.Adamax, torch.optim.Adamax, dict(lr=0.01, weight_decay=0.1, betas=(0.7, 0.9))),
    (diffopt.RAdam, torch.optim.RAdam, dict(lr=0.01, eps=1e-8)),
    (diffopt.RAdam, torch.optim.RAdam, dict(lr=0.01, eps=1e-7, weight_decay=0.1,
                                            betas=(0.8, 0.9))),
    (diffopt.NAdam, torch.optim.NAdam, dict(lr=0.01)),
    (diffopt.NAdam, torch.optim.NAdam, dict(lr=0.01, weight_decay=0.1, momentum_decay=6e-3, maximize=True)),
    (diffopt.NAdam, torch.optim.NAdam, dict(lr=0.01, weight_decay=0.1, momentum_decay=6e-3,
                                            decoupled_weight_decay=True, betas=(0.8, 0.9))),
    (diffopt.Rprop, torch.optim.Rprop, dict(lr=0.01)),
    (diffopt.Rprop, torch.optim.Rprop, dict(lr=2e-3, etas=(0.3, 1.5), step_sizes=(1e-4, 0.05),
                                            maximize=True)),
    (diffopt.ASGD, torch.optim.ASGD, dict(lr=0.05)),
    (diffopt.Adafactor, torch.optim.Adafactor, dict()),
    (diffopt.Adafactor, torch.optim.Adafactor, dict(lr=0.01, weight_decay=0.1)),
    (diffopt.Adafactor, torch.optim.Adafactor, dict(weight_decay=0.1, maximize=True)),
    (diffopt.Adafactor, torch.optim.Adafactor, dict(beta2_decay=-1.0, d=1.5, eps=(1e-20, 1e-2))),
    (diffopt.ASGD, torch.optim.ASGD, dict(lr=0.05, lambd=0.1, alpha=0.5, t0=10, weight_decay=0.1, maximize=True)),
]

# Lion and Adan are not in torch.optim: their twins are fused-optim's drop-in classes.
CASES += [
    (diffopt.Lion, fused_optim.Lion, dict(lr=0.01)),
    (diffopt.Lion, fused_optim.Lion, dict(lr=0.01, betas=(0.8, 0.9), weight_decay=0.5, maximize=True)),
    (diffopt.Adan, fused_optim.Adan, dict(lr=0.01)),
    (diffopt.Adan, fused_optim.Adan, dict(lr=0.01, betas=(0.9, 0.8, 0.95), weight_decay=0.1)),
    (diffopt.Adan, fused_optim.Adan, dict(lr=0.01, weight_decay=0.1, no_prox=True, maximize=True)),
]

STEPS = 40


def _train(make_opt, seed=0):
    net = small_mlp(seed, activation=torch.nn.Tanh, sizes=(3, 8, 2))
    opt = make_opt(net.parameters())
    generator = torch.Generator().manual_seed(123)
    for _ in range(STEPS):
        x = torch.randn(16, 3, generator=generator, dtype=torch.float64)
        opt.zero_grad()
        out = net(x)
        loss = (out - out.detach().mean()).pow(2).mean() + 0.1 * out.sin().mean()
        loss.backward()
        opt.step()
    return [p.detach() for p in net.parameters()]


@pytest.mark.parametrize(("ours", "theirs", "kwargs"), CASES,
                         ids=[f"{c[0].__name__}-{i}" for i, c in enumerate(CASES)])
def test_matches_torch_optim(ours, theirs, kwargs):
    expected = _train(lambda p: theirs(p, **kwargs))
    got = _train(lambda p: ours(p, **kwargs))
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, rtol=1e-9, atol=1e-11)


ACCELERATED = [
    (diffopt.NAdam, torch.optim.NAdam, dict(lr=0.01, weight_decay=0.1, momentum_decay=6e-3)),
    (diffopt.NAdam, torch.optim.NAdam, dict(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True, maximize=True)),
    (diffopt.Rprop, torch.optim.Rprop, dict(lr=0.01, etas=(0.3, 1.5), maximize=True)),
    (diffopt.ASGD, torch.optim.ASGD, dict(lr=0.05, lambd=0.1, t0=10, weight_decay=0.1)),
    (diffopt.Adafactor, torch.optim.Adafactor, dict(lr=0.05, weight_decay=0.1, maximize=True)),
    (diffopt.Adafactor, torch.optim.Adafactor, dict(lr=1.0, beta2_decay=-0.5, eps=(1e-3, 0.1), d=2.0)),
]


@pytest.mark.parametrize(("ours", "theirs", "kwargs"), ACCELERATED,
                         ids=[f"{c[0].__name__}-{i}" for i, c in enumerate(ACCELERATED)])
def test_accelerated_matches_torch_optim(ours, theirs, kwargs):
    pytest.importorskip("fused_optim")
    expected = _train(lambda p: theirs(p, **kwargs))
    got = _train(lambda p: ours(p, **kwargs, use_accelerated_op=True))
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, rtol=1e-9, atol=1e-11)


def test_accelerated_adam_matches_torch_optim():
    pytest.importorskip("fused_optim")
    expected = _train(lambda p: torch.optim.Adam(p, lr=0.01))
    got = _train(lambda p: diffopt.Adam(p, lr=0.01, use_accelerated_op=True))
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, rtol=1e-9, atol=1e-11)


def test_params_without_grad_are_left_alone():
    a = torch.ones(2, requires_grad=True)
    b = torch.ones(2, requires_grad=True)
    opt = diffopt.Adam([a, b], lr=0.1)
    a.sum().backward()
    opt.step()
    assert torch.equal(b, torch.ones(2))
    assert not torch.equal(a, torch.ones(2))
    # b's moments are untouched, as torch.optim would leave them; the state is TorchOpt's
    # (ScaleByAdamState, EmptyState) (the weight-decay identity is dropped from the chain)
    adam_state, _ = opt.state_dict()[0]
    assert torch.equal(adam_state.mu[1], torch.zeros(2))


def test_closure_and_zero_grad():
    w = torch.tensor([2.0], requires_grad=True)
    opt = diffopt.SGD([w], lr=0.25)

    def closure():
        opt.zero_grad()
        loss = (w**2).sum()
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert loss.item() == 4.0
    assert torch.equal(w.detach(), torch.tensor([1.0]))
    opt.zero_grad()
    assert w.grad is None
    (w**2).sum().backward()
    opt.zero_grad(set_to_none=False)
    assert torch.equal(w.grad, torch.zeros(1))


def test_param_groups_and_state_save_restore_mid_training():
    def run(split):
        torch.manual_seed(0)
        a = torch.randn(3, dtype=torch.float64, requires_grad=True)
        b = torch.randn(2, dtype=torch.float64, requires_grad=True)
        opt = diffopt.Adam([a], lr=0.05)
        opt.add_param_group([b])
        saved = None
        for step in range(10):
            opt.zero_grad()
            ((a**2).sum() + (b**3).sum()).backward()
            opt.step()
            if split and step == 4:
                saved = (diffopt.extract_state_dict(opt, by="deepcopy"),
                         a.detach().clone(), b.detach().clone())
        final = (a.detach().clone(), b.detach().clone())
        return saved, final

    saved, final = run(split=True)
    # A fresh optimizer restored from the step-5 snapshot must finish identically.
    state, a0, b0 = saved
    a = a0.clone().requires_grad_()
    b = b0.clone().requires_grad_()
    opt = diffopt.Adam([a], lr=0.05)
    opt.add_param_group([b])
    diffopt.recover_state_dict(opt, state)
    for _ in range(5):
        opt.zero_grad()
        ((a**2).sum() + (b**3).sum()).backward()
        opt.step()
    # the same operations on the same values as the uninterrupted run: bit for bit
    torch.testing.assert_close(a.detach(), final[0], rtol=0, atol=0)
    torch.testing.assert_close(b.detach(), final[1], rtol=0, atol=0)


def test_bad_construction_raises():
    with pytest.raises(TypeError, match="single tensor"):
        diffopt.SGD(torch.ones(2, requires_grad=True), lr=0.1)
    with pytest.raises(ValueError, match="learning rate"):
        diffopt.Adam([torch.ones(1, requires_grad=True)], lr=-1.0)
    w = torch.ones(1, requires_grad=True)
    opt = diffopt.SGD([w], lr=0.1)
    with pytest.raises(ValueError, match="more than one"):
        opt.add_param_group([w])
    with pytest.raises(ValueError, match="group states"):
        opt.load_state_dict(())
