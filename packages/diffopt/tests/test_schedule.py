"""Schedules against their closed forms, and inside an optimizer."""

import math

import pytest
import torch

import diffopt


def test_polynomial_closed_form():
    schedule = diffopt.polynomial_schedule(1.0, 0.1, power=3, transition_steps=10,
                                           transition_begin=2)
    for t in range(20):
        frac = 1 - min(max(t - 2, 0), 10) / 10
        assert schedule(t) == pytest.approx(0.9 * frac**3 + 0.1)
    assert schedule(torch.tensor(7)) == pytest.approx(schedule(7))


def test_linear_and_constant():
    schedule = diffopt.linear_schedule(0.0, 1.0, transition_steps=4)
    assert [schedule(t) for t in range(6)] == [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
    assert diffopt.linear_schedule(0.3, 1.0, transition_steps=0)(100) == 0.3


def test_exponential_decay_closed_form():
    schedule = diffopt.exponential_decay(2.0, 0.5, transition_begin=3, transition_steps=4)
    for t in range(20):
        assert schedule(t) == pytest.approx(2.0 * 0.5 ** (max(t - 3, 0) / 4))
    stairs = diffopt.exponential_decay(1.0, 0.5, transition_steps=3, staircase=True)
    assert [stairs(t) for t in range(7)] == [1, 1, 1, 0.5, 0.5, 0.5, 0.25]
    floor = diffopt.exponential_decay(1.0, 0.1, end_value=0.05)
    assert floor(100) == 0.05
    growth = diffopt.exponential_decay(1.0, 2.0, end_value=5.0)
    assert growth(10) == 5.0
    with pytest.raises(ValueError):
        diffopt.exponential_decay(1.0, 0.5, transition_steps=0)


def test_schedule_drives_sgd():
    schedule = diffopt.linear_schedule(1.0, 0.0, transition_steps=4)
    tx = diffopt.sgd(lr=schedule)
    params = [torch.zeros(1)]
    state = tx.init(params)
    seen = []
    for _ in range(5):
        updates, state = tx.update([torch.ones(1)], state, params=params)
        seen.append(-updates[0].item())
    assert seen == pytest.approx([1.0, 0.75, 0.5, 0.25, 0.0])


def test_adagrad_lr_decay_matches_formula():
    tx = diffopt.adagrad(lr=1.0, lr_decay=0.5, eps=0.0)
    params = [torch.zeros(1, dtype=torch.float64)]
    state = tx.init(params)
    total = 0.0
    for t in range(1, 5):
        updates, state = tx.update([torch.ones(1, dtype=torch.float64)], state, params=params)
        total += 1.0
        assert updates[0].item() == pytest.approx(-1.0 / (1 + (t - 1) * 0.5) / math.sqrt(total))
