"""inject_hyperparams: meta-gradients against float64 central differences, schedules, state edits."""

from __future__ import annotations

import inspect

import pytest
import torch

import diffopt
from diffopt.diff.implicit import custom_root

DTYPE = torch.float64
ALIASES = [
    "adadelta",
    "adafactor",
    "adagrad",
    "adam",
    "adamax",
    "adamw",
    "adan",
    "asgd",
    "lion",
    "nadam",
    "radam",
    "rmsprop",
    "rprop",
    "sgd",
]
# Arguments each alias takes as numbers only (a tensor is rejected with a TypeError).
NUMBERS_ONLY = {"asgd": {"lambd", "alpha", "t0"}}
# Defaults at an end of their range (adafactor's d >= 1): no central difference there.
AT_A_BOUND = {"adafactor": {"d"}}
STEPS = 4

_gen = torch.Generator().manual_seed(0)
A = torch.randn(6, 3, generator=_gen, dtype=DTYPE)
B = torch.randn(6, generator=_gen, dtype=DTYPE)
A_VAL = torch.randn(6, 3, generator=_gen, dtype=DTYPE)
B_VAL = torch.randn(6, generator=_gen, dtype=DTYPE)
W0 = torch.randn(3, generator=_gen, dtype=DTYPE)


def grad_of_train_loss(w):
    """The gradient of ``0.5 |A w - b|^2`` written out, a differentiable function of ``w``."""
    return A.T @ (A @ w - B)


def val_loss(w):
    return 0.5 * (A_VAL @ w - B_VAL).pow(2).sum()


def unrolled_val_loss(tx):
    """The validation loss after ``STEPS`` out-of-place updates of ``tx`` on the training loss."""
    params = {"w": W0.clone()}
    state = tx.init(params)
    for _ in range(STEPS):
        updates, state = tx.update(
            {"w": grad_of_train_loss(params["w"])}, state, params=params, inplace=False
        )
        params = diffopt.apply_updates(params, updates, inplace=False)
    return val_loss(params["w"])


def accelerated_flags(name):
    has = "use_accelerated_op" in inspect.signature(getattr(diffopt, name)).parameters
    return [False, True] if has else [False]


def learnable(name):
    """The alias's non-zero float arguments (and tuples of floats): each one learned here."""
    out = {"lr": 0.05}
    for key, p in inspect.signature(getattr(diffopt, name)).parameters.items():
        value = p.default
        if key in NUMBERS_ONLY.get(name, ()) or key in AT_A_BOUND.get(name, ()) or key == "lr":
            continue
        floats = value if isinstance(value, tuple) and value else (value,)
        if all(type(v) is float for v in floats) and value != 0.0:
            out[key] = value
    return out


def central_difference(name, flags, numbers, key, index, h):
    """d(unrolled loss)/d(numbers[key][index]) by float64 central differences on the alias itself
    (built from Python numbers, without inject_hyperparams)."""

    def at(delta):
        values = dict(numbers)
        if index is None:
            values[key] = numbers[key] + delta
        else:
            values[key] = tuple(v + delta if i == index else v for i, v in enumerate(numbers[key]))
        return unrolled_val_loss(getattr(diffopt, name)(**values, **flags)).item()

    return (at(h) - at(-h)) / (2 * h)


@pytest.fixture
def float64_default():
    """ASGD's and NAdam's state scalars take the default dtype (as torch.optim's do): float64
    here, so that central differences are not lost in float32 rounding."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(DTYPE)
    yield
    torch.set_default_dtype(previous)


@pytest.mark.usefixtures("float64_default")
@pytest.mark.parametrize(
    ("name", "accelerated"), [(n, a) for n in ALIASES for a in accelerated_flags(n)]
)
def test_meta_gradients_of_every_hyperparameter_equal_central_differences(name, accelerated):
    flags = {"use_accelerated_op": True} if accelerated else {}
    numbers = learnable(name)
    tensors = {
        k: (
            tuple(torch.tensor(x, dtype=DTYPE, requires_grad=True) for x in v)
            if isinstance(v, tuple)
            else torch.tensor(v, dtype=DTYPE, requires_grad=True)
        )
        for k, v in numbers.items()
    }
    tx = diffopt.inject_hyperparams(getattr(diffopt, name))(**tensors, **flags)
    loss = unrolled_val_loss(tx)
    # The injected optimizer computes what the alias does with the same numbers.
    expected = unrolled_val_loss(getattr(diffopt, name)(**numbers, **flags))
    torch.testing.assert_close(loss, expected, rtol=1e-12, atol=1e-12)
    leaves = [
        (k, i, t)
        for k, v in tensors.items()
        for i, t in (enumerate(v) if isinstance(v, tuple) else [(None, v)])
    ]
    grads = torch.autograd.grad(loss, [t for _, _, t in leaves])
    for (key, index, t), grad in zip(leaves, grads):
        value = t.item()
        h = 1e-5 * abs(value)  # relative: eps is 1e-8, lr 0.05
        # Truncation error ~h^2, and the losses' float64 rounding (~1e-15) over 2h.
        tolerance = 1e-6 * (1 + abs(grad.item())) + 1e-14 / h
        if key == "betas" and value + h >= 1.0:
            h = (1.0 - value) / 4
        numeric = central_difference(name, flags, numbers, key, index, h)
        assert grad.item() == pytest.approx(numeric, rel=1e-5, abs=tolerance), (key, index)


def test_the_learning_rate_meta_gradient_after_k_adam_steps_equals_central_differences():
    lr = torch.tensor(0.03, dtype=DTYPE, requires_grad=True)
    for accelerated in (False, True):
        tx = diffopt.inject_hyperparams(diffopt.adam)(lr=lr, use_accelerated_op=accelerated)
        (grad,) = torch.autograd.grad(unrolled_val_loss(tx), lr)
        h = 1e-7

        def at(value, accelerated=accelerated):
            return unrolled_val_loss(diffopt.adam(lr=value, use_accelerated_op=accelerated)).item()

        numeric = (at(0.03 + h) - at(0.03 - h)) / (2 * h)
        assert grad.item() == pytest.approx(numeric, rel=1e-6)


def test_meta_optimizer_steps_reach_a_learned_learning_rate():
    """MetaAdam-style: a MetaOptimizer over a module with an injected, learned lr."""
    lr = torch.tensor(0.05, dtype=DTYPE, requires_grad=True)

    def meta_loss(lr_value):
        net = torch.nn.Linear(3, 1, dtype=DTYPE)
        with torch.no_grad():
            net.weight.copy_(W0[None])
            net.bias.zero_()
        opt = diffopt.MetaOptimizer(net, diffopt.inject_hyperparams(diffopt.adam)(lr=lr_value))
        for _ in range(STEPS):
            opt.step(0.5 * (net(A).squeeze(-1) - B).pow(2).sum())
        return 0.5 * (net(A_VAL).squeeze(-1) - B_VAL).pow(2).sum()

    (grad,) = torch.autograd.grad(meta_loss(lr), lr)
    h = 1e-7
    numeric = (meta_loss(0.05 + h).item() - meta_loss(0.05 - h).item()) / (2 * h)
    assert grad.item() == pytest.approx(numeric, rel=1e-6)


def test_implicit_meta_gradient_of_an_injected_weight_decay_equals_the_closed_form():
    """custom_root over a solver that runs the injected optimizer to convergence: the
    hyper-gradient of the ridge penalty is that of the closed-form solution."""

    def optimality(w, lam):
        return A.T @ (A @ w - B) + lam * w

    @custom_root(optimality, argnums=1)
    def solver(w0, lam):
        tx = diffopt.inject_hyperparams(diffopt.sgd)(lr=0.02, weight_decay=lam)
        params = [w0.clone()]
        state = tx.init(params)
        with torch.no_grad():
            for _ in range(3000):
                updates, state = tx.update([A.T @ (A @ params[0] - B)], state, params=params)
                params = diffopt.apply_updates(params, updates)
        return params[0]

    lam = torch.tensor(0.7, dtype=DTYPE, requires_grad=True)
    w = solver(torch.zeros(3, dtype=DTYPE), lam)
    (grad,) = torch.autograd.grad(val_loss(w), lam)
    H = A.T @ A + 0.7 * torch.eye(3, dtype=DTYPE)
    w_star = torch.linalg.solve(H, A.T @ B)
    torch.testing.assert_close(w.detach(), w_star, rtol=1e-10, atol=1e-10)
    closed = -(A_VAL.T @ (A_VAL @ w_star - B_VAL)) @ torch.linalg.solve(H, w_star)
    torch.testing.assert_close(grad, closed, rtol=1e-8, atol=1e-10)


def test_schedules_are_evaluated_at_the_step_count_and_kept_in_the_state():
    schedule = diffopt.schedule.linear_schedule(1.0, 0.0, transition_steps=4)
    tx = diffopt.inject_hyperparams(diffopt.sgd)(lr=schedule, momentum=0.5)
    params = [torch.zeros(1, dtype=DTYPE)]
    state = tx.init(params)
    assert float(state.hyperparams["lr"]) == 1.0 and state.hyperparams["momentum"] == 0.5
    reference = diffopt.sgd(lr=1.0, momentum=0.5)  # the same momentum, the lr applied by hand
    ref_state = reference.init(params)
    for step in range(6):
        g = [torch.full((1,), float(step + 1), dtype=DTYPE)]
        updates, state = tx.update(g, state, params=params)
        ref_updates, ref_state = reference.update(g, ref_state, params=params)
        lr = max(1.0 - step / 4, 0.0)
        assert int(state.count) == step + 1
        assert float(state.hyperparams["lr"]) == pytest.approx(lr)
        torch.testing.assert_close(updates[0], ref_updates[0] * lr)


def test_a_value_changed_in_the_state_acts_on_the_next_update():
    tx = diffopt.inject_hyperparams(diffopt.adam)(lr=0.1, betas=(0.0, 0.0), eps=0.0)
    params = [torch.zeros(2, dtype=DTYPE)]
    state = tx.init(params)
    assert state.hyperparams == {
        "lr": 0.1,
        "betas": (0.0, 0.0),
        "eps": 0.0,
        "weight_decay": 0.0,
        "eps_root": 0.0,
    }
    state.hyperparams["lr"] = 0.5
    updates, state = tx.update([torch.tensor([2.0, -4.0], dtype=DTYPE)], state, params=params)
    # betas 0: the update is -lr * sign(g)
    torch.testing.assert_close(updates[0], torch.tensor([-0.5, 0.5], dtype=DTYPE))
    assert state.hyperparams["lr"] == 0.5


def test_static_and_fixed_arguments_stay_out_of_the_state():
    tx = diffopt.inject_hyperparams(diffopt.adamw, static_args="eps")(
        lr=0.1, mask=lambda p: [True], maximize=True
    )
    state = tx.init([torch.zeros(1)])
    assert "eps" not in state.hyperparams and "mask" not in state.hyperparams
    assert "maximize" not in state.hyperparams and state.hyperparams["lr"] == 0.1


def test_bad_arguments_and_states_raise_clear_errors():
    with pytest.raises(TypeError, match=r"inject_hyperparams\(adam\).*unexpected"):
        diffopt.inject_hyperparams(diffopt.adam)(learning_rate=0.1)
    tx = diffopt.inject_hyperparams(diffopt.sgd)(lr=0.1)
    with pytest.raises(TypeError, match="InjectHyperparamsState"):
        tx.update([torch.ones(1)], (), params=[torch.ones(1)])
    state = tx.init([torch.ones(1)])
    del state.hyperparams["lr"]
    with pytest.raises(KeyError, match="lr"):
        tx.update([torch.ones(1)], state)
    with pytest.raises(TypeError, match="lambd must be a number"):
        diffopt.inject_hyperparams(diffopt.asgd)(lambd=torch.tensor(1e-4)).init([torch.ones(1)])
