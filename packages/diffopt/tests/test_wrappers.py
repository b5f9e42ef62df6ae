"""MultiSteps, apply_if_finite, lookahead and multi_transform against pure-Python references."""

from __future__ import annotations

import math

import pytest
import torch

import diffopt

DTYPE = torch.float64


def python_adam(lr, b1=0.9, b2=0.999, eps=1e-8):
    """Adam on one float, in plain Python: ``step(g) -> update``."""
    m = v = 0.0
    t = 0

    def step(g):
        nonlocal m, v, t
        t += 1
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        return -lr * (m / (1 - b1**t)) / (math.sqrt(v / (1 - b2**t)) + eps)

    return step


GRADS = [0.5, -1.25, 2.0, 0.75, -0.5, 1.5, 3.0, -2.0, 0.25, 1.0, -0.75, 0.5]


@pytest.mark.parametrize("use_grad_mean", [True, False])
def test_multi_steps_runs_adam_on_the_mean_of_every_k_gradients(use_grad_mean):
    k = 3
    tx = diffopt.MultiSteps(diffopt.adam(lr=0.1), every_k_schedule=k, use_grad_mean=use_grad_mean)
    params = [torch.zeros(1, dtype=DTYPE)]
    state = tx.init(params)
    reference, group = python_adam(0.1), []
    for i, g in enumerate(GRADS):
        updates, state = tx.update([torch.tensor([g], dtype=DTYPE)], state, params=params)
        group.append(g)
        if len(group) == k:
            total = sum(group)
            expected = reference(total / k if use_grad_mean else total)
            group = []
        else:
            expected = 0.0
        assert updates[0].item() == pytest.approx(expected, rel=1e-12, abs=1e-15), i
        assert bool(tx.has_updated(state)) == (expected != 0.0)
        assert int(state.gradient_step) == (i + 1) // k and int(state.mini_step) == (i + 1) % k


def test_multi_steps_follows_a_schedule_of_k():
    # k = 1 for the first inner update, then 2, then 3...
    tx = diffopt.MultiSteps(diffopt.sgd(lr=1.0), every_k_schedule=lambda step: step + 1)
    params = {"w": torch.zeros(1, dtype=DTYPE)}
    state = tx.init(params)
    emitted = []
    for i, g in enumerate(GRADS[:10]):
        updates, state = tx.update({"w": torch.tensor([g], dtype=DTYPE)}, state, params=params)
        if bool(tx.has_updated(state)):
            emitted.append((i, updates["w"].item()))
    # Groups: [0], [1, 2], [3, 4, 5], [6, 7, 8, 9]
    groups = [[0], [1, 2], [3, 4, 5], [6, 7, 8, 9]]
    expected = [(grp[-1], -sum(GRADS[j] for j in grp) / len(grp)) for grp in groups]
    assert [i for i, _ in emitted] == [i for i, _ in expected]
    assert [u for _, u in emitted] == pytest.approx([u for _, u in expected], rel=1e-12)


def test_multi_steps_keeps_none_gradients_and_is_differentiable():
    tx = diffopt.MultiSteps(diffopt.sgd(lr=0.5), every_k_schedule=2).gradient_transformation()
    w = torch.tensor([1.0], dtype=DTYPE, requires_grad=True)
    params = [w, torch.zeros(1, dtype=DTYPE)]
    state = tx.init(params)
    _, state = tx.update([w * 2, None], state, params=params, inplace=False)
    updates, state = tx.update([w * 4, None], state, params=params, inplace=False)
    assert updates[1] is None
    (grad,) = torch.autograd.grad(updates[0].sum(), w)
    assert grad.item() == pytest.approx(-0.5 * 3)  # -lr * d(mean(2w, 4w))/dw


def test_apply_if_finite_skips_non_finite_gradients_until_the_limit():
    tx = diffopt.apply_if_finite(diffopt.sgd(lr=1.0, momentum=0.5), max_consecutive_errors=2)
    params = [torch.zeros(2, dtype=DTYPE)]
    state = tx.init(params)
    nan, inf = float("nan"), float("inf")
    sequence = [
        [1.0, 1.0],
        [nan, 1.0],
        [2.0, inf],
        [1.0, 1.0],
        [nan, 0.0],
        [inf, 0.0],
        [nan, 0.0],
        [1.0, 2.0],
    ]
    momentum = [0.0, 0.0]  # reference: SGD with momentum 0.5 in plain Python
    consecutive = total = 0
    for i, g in enumerate(sequence):
        finite = all(math.isfinite(x) for x in g)
        consecutive = 0 if finite else consecutive + 1
        total += not finite
        updates, state = tx.update([torch.tensor(g, dtype=DTYPE)], state, params=params)
        if finite or consecutive > 2:
            momentum = [0.5 * m + x for m, x in zip(momentum, g)]
            expected = [-m for m in momentum]
            got = updates[0].tolist()
            for e, u in zip(expected, got):
                assert (math.isnan(e) and math.isnan(u)) or e == pytest.approx(u), i
        else:
            assert updates[0].tolist() == [0.0, 0.0], i
        assert int(state.notfinite_count) == consecutive
        assert int(state.total_notfinite) == total
        assert bool(state.last_finite) == finite


def test_lookahead_equals_the_two_loop_algorithm():
    sync_period, alpha, lr = 3, 0.4, 0.1
    tx = diffopt.lookahead(diffopt.sgd(lr=lr), sync_period=sync_period, slow_step_size=alpha)
    params = diffopt.LookaheadParams.init_synced([torch.tensor([1.0, -2.0], dtype=DTYPE)])
    state = tx.init(params)

    def grad(x):  # of 0.5 * sum(c * x^2)
        return [c * xi for c, xi in zip((1.0, 3.0), x)]

    slow = fast = [1.0, -2.0]  # reference: the paper's nested loops in plain Python
    for outer in range(4):
        for _ in range(sync_period):
            g = grad(fast)
            updates, state = tx.update([torch.tensor(g, dtype=DTYPE)], state, params=params)
            params = diffopt.apply_updates(params, updates)
            fast = [f - lr * gi for f, gi in zip(fast, g)]
        slow = [s + alpha * (f - s) for s, f in zip(slow, fast)]
        fast = slow
        assert params.slow[0].tolist() == pytest.approx(slow, rel=1e-12), outer
        assert params.fast[0].tolist() == pytest.approx(fast, rel=1e-12), outer


def test_lookahead_reset_state_restarts_the_fast_optimizer():
    tx = diffopt.lookahead(
        diffopt.sgd(lr=1.0, momentum=0.9), sync_period=2, slow_step_size=0.5, reset_state=True
    )
    params = diffopt.LookaheadParams.init_synced([torch.zeros(1, dtype=DTYPE)])
    state = tx.init(params)
    for _ in range(2):
        _, state = tx.update([torch.ones(1, dtype=DTYPE)], state, params=params)
    # the momentum buffer is back at its initial value after the sync
    fresh = diffopt.sgd(lr=1.0, momentum=0.9).init([torch.zeros(1, dtype=DTYPE)])
    assert str(state.fast_state) == str(fresh)


def test_multi_transform_updates_each_group_with_its_own_optimizer():
    params = {
        "w": torch.tensor([1.0, 2.0], dtype=DTYPE),
        "b": torch.tensor([0.5], dtype=DTYPE),
        "frozen": torch.tensor([3.0], dtype=DTYPE),
    }

    def labels(tree):
        return {k: "frozen" if k == "frozen" else "adam" if k == "w" else "sgd" for k in tree}

    tx = diffopt.multi_transform(
        {
            "adam": diffopt.adam(lr=0.1),
            "sgd": diffopt.sgd(lr=0.5, momentum=0.5),
            "frozen": diffopt.scale(0.0),
        },
        labels,
    )
    state = tx.init(params)
    adam = [python_adam(0.1), python_adam(0.1)]
    momentum = 0.0
    for step in range(4):
        grads = {
            "w": torch.tensor([1.0 + step, -2.0], dtype=DTYPE),
            "b": torch.tensor([0.25 * step - 0.5], dtype=DTYPE),
            "frozen": torch.tensor([9.0], dtype=DTYPE),
        }
        updates, state = tx.update(grads, state, params=params)
        expected_w = [adam[i](grads["w"][i].item()) for i in range(2)]
        momentum = 0.5 * momentum + grads["b"].item() if step else grads["b"].item()
        assert updates["w"].tolist() == pytest.approx(expected_w, rel=1e-12)
        assert updates["b"].item() == pytest.approx(-0.5 * momentum, rel=1e-12)
        assert updates["frozen"].item() == 0.0
    # Adam keeps moments for the 'w' leaf only
    adam_state = state.inner_states["adam"].inner_state[0]
    assert isinstance(adam_state.mu["b"], diffopt.transform.MaskedNode)


def test_multi_transform_rejects_unknown_labels_and_bad_transforms():
    with pytest.raises(ValueError, match="no transformation for the labels"):
        diffopt.multi_transform({"a": diffopt.sgd(0.1)}, ["a", "b"]).init(
            [torch.zeros(1), torch.zeros(1)]
        )
    with pytest.raises(TypeError, match=r"transforms\['a'\]"):
        diffopt.multi_transform({"a": 3}, ["a"])


def test_wrappers_reject_bad_arguments():
    with pytest.raises(ValueError, match="every_k_schedule"):
        diffopt.MultiSteps(diffopt.sgd(0.1), 0)
    with pytest.raises(ValueError, match="max_consecutive_errors"):
        diffopt.apply_if_finite(diffopt.sgd(0.1), -1)
    with pytest.raises(ValueError, match="sync_period"):
        diffopt.lookahead(diffopt.sgd(0.1), 0, 0.5)
    tx = diffopt.lookahead(diffopt.sgd(0.1), 2, 0.5)
    with pytest.raises(TypeError, match="LookaheadParams"):
        tx.update([torch.zeros(1)], tx.init([torch.zeros(1)]), params=[torch.zeros(1)])
