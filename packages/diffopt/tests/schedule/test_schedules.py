"""Optax's schedules: each against its closed form written out here, at 20 steps, int and tensor."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from diffopt import schedule as sch

STEPS = range(20)


def cosine_decay(t, init, steps, alpha=0.0, exponent=1.0):
    t = min(t, steps)
    return init * ((1 - alpha) * ((1 + math.cos(math.pi * t / steps)) / 2) ** exponent + alpha)


def warmup_cosine(t, init, peak, warmup, steps, end, exponent=1.0):
    if t < warmup:
        return init + (peak - init) * t / warmup
    return cosine_decay(t - warmup, peak, steps - warmup, end / peak, exponent)


def half_cosine(a, b, pct):
    """From ``a`` (pct 0) to ``b`` (pct 1) along a half cosine."""
    return b + (a - b) * (1 + math.cos(math.pi * pct)) / 2


def onecycle_cosine(t, steps, peak, pct_start, div, final_div):
    start, rise_end = peak / div, int(pct_start * steps)
    final = start / final_div
    if t < rise_end:
        return half_cosine(start, peak, t / rise_end)
    if t < steps:
        return half_cosine(peak, final, (t - rise_end) / (steps - rise_end))
    return final


def onecycle_linear(t, steps, peak, pct_start, pct_final, div, final_div):
    knots = [
        (0, peak / div),
        (int(pct_start * steps), peak),
        (int(pct_final * steps), peak / div),
        (steps, peak / div / final_div),
    ]
    for (t0, v0), (t1, v1) in itertools.pairwise(knots):
        if t0 <= t < t1:
            return v0 + (v1 - v0) * (t - t0) / (t1 - t0)
    return knots[-1][1]


def warmup_exponential(t, init, peak, warmup, steps, rate, begin=0, staircase=False, end=None):
    if t < warmup:
        return init + (peak - init) * t / warmup
    power = max(t - warmup - begin, 0) / steps
    value = peak * rate ** (math.floor(power) if staircase else power)
    return value if end is None else max(value, end)


CYCLES = [
    {"init_value": 0.0, "peak_value": 1.0, "warmup_steps": 2, "decay_steps": 7},
    {"init_value": 0.1, "peak_value": 0.5, "warmup_steps": 1, "decay_steps": 6, "end_value": 0.05},
]


def sgdr(t):
    if t < 7:
        return warmup_cosine(t, 0.0, 1.0, 2, 7, 0.0)
    return warmup_cosine(t - 7, 0.1, 0.5, 1, 6, 0.05)


CASES = {
    "cosine_decay": (
        sch.cosine_decay_schedule(0.3, 13, alpha=0.1),
        lambda t: cosine_decay(t, 0.3, 13, 0.1),
    ),
    "cosine_decay_exponent": (
        sch.cosine_decay_schedule(2.0, 7, exponent=2.0),
        lambda t: cosine_decay(t, 2.0, 7, 0.0, 2.0),
    ),
    "warmup_cosine": (
        sch.warmup_cosine_decay_schedule(0.01, 1.0, 4, 17, end_value=0.05),
        lambda t: warmup_cosine(t, 0.01, 1.0, 4, 17, 0.05),
    ),
    "warmup_cosine_no_warmup": (
        sch.warmup_cosine_decay_schedule(0.0, 0.5, 0, 10, exponent=1.5),
        lambda t: warmup_cosine(t, 0.0, 0.5, 0, 10, 0.0, 1.5),
    ),
    "piecewise_constant": (
        sch.piecewise_constant_schedule(0.1, {8: 0.1, 3: 0.5, 15: 2.0}),
        lambda t: 0.1 * (0.5 if t >= 3 else 1) * (0.1 if t >= 8 else 1) * (2.0 if t >= 15 else 1),
    ),
    "cosine_onecycle": (
        sch.cosine_onecycle_schedule(15, 1.2),
        lambda t: onecycle_cosine(t, 15, 1.2, 0.3, 25.0, 1e4),
    ),
    "cosine_onecycle_options": (
        sch.cosine_onecycle_schedule(
            18, 0.7, pct_start=0.25, div_factor=5.0, final_div_factor=10.0
        ),
        lambda t: onecycle_cosine(t, 18, 0.7, 0.25, 5.0, 10.0),
    ),
    "linear_onecycle": (
        sch.linear_onecycle_schedule(16, 1.0),
        lambda t: onecycle_linear(t, 16, 1.0, 0.3, 0.85, 25.0, 1e4),
    ),
    "constant": (sch.constant_schedule(0.25), lambda t: 0.25),
    "warmup_constant": (
        sch.warmup_constant_schedule(0.1, 1.0, 7),
        lambda t: 0.1 + 0.9 * min(t, 7) / 7,
    ),
    "warmup_exponential": (
        sch.warmup_exponential_decay_schedule(
            0.0, 1.0, 5, 3, 0.7, transition_begin=2, end_value=0.2
        ),
        lambda t: warmup_exponential(t, 0.0, 1.0, 5, 3, 0.7, begin=2, end=0.2),
    ),
    "warmup_exponential_staircase": (
        sch.warmup_exponential_decay_schedule(0.5, 1.0, 3, 2, 0.5, staircase=True),
        lambda t: warmup_exponential(t, 0.5, 1.0, 3, 2, 0.5, staircase=True),
    ),
    "sgdr": (sch.sgdr_schedule(CYCLES), sgdr),
    "join": (
        sch.join_schedules(
            [
                sch.constant_schedule(1.0),
                sch.cosine_decay_schedule(1.0, 5),
                sch.linear_schedule(0.5, 1.0, 4),
            ],
            [6, 11],
        ),
        lambda t: (
            1.0
            if t < 6
            else cosine_decay(t - 6, 1.0, 5)
            if t < 11
            else 0.5 + 0.5 * min(t - 11, 4) / 4
        ),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_schedule_equals_its_closed_form_on_ints_and_tensors(case):
    schedule, closed_form = CASES[case]
    expected = [closed_form(t) for t in STEPS]
    on_ints = [schedule(t) for t in STEPS]
    assert all(type(v) is float for v in on_ints)
    assert on_ints == pytest.approx(expected, rel=1e-12, abs=1e-15)
    on_tensor = schedule(torch.tensor(list(STEPS)))
    assert on_tensor.dtype == torch.float64 and on_tensor.shape == (len(STEPS),)
    assert on_tensor.tolist() == pytest.approx(expected, rel=1e-12, abs=1e-15)
    # A 0-d count (the optimizers' step count) gives a 0-d tensor.
    assert schedule(torch.tensor(5)).shape == ()
    assert schedule(torch.tensor(5)).item() == pytest.approx(expected[5], rel=1e-12, abs=1e-15)


def test_piecewise_interpolate_cosine_is_a_half_cosine_between_the_boundaries():
    schedule = sch.piecewise_interpolate_schedule("cosine", 1.0, {5: 2.0, 12: 0.25})
    for t in STEPS:
        if t < 5:
            expected = half_cosine(1.0, 2.0, t / 5)
        elif t < 12:
            expected = half_cosine(2.0, 0.5, (t - 5) / 7)
        else:
            expected = 0.5
        assert schedule(t) == pytest.approx(expected, rel=1e-12)
        assert schedule(torch.tensor(t)).item() == pytest.approx(expected, rel=1e-12)


def test_schedules_run_under_vmap():
    schedule = sch.warmup_cosine_decay_schedule(0.0, 1.0, 3, 9)
    counts = torch.arange(12)
    batched = torch.func.vmap(schedule)(counts)
    torch.testing.assert_close(batched, schedule(counts))


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="decay_steps must be positive"):
        sch.cosine_decay_schedule(1.0, 0)
    with pytest.raises(ValueError, match="must exceed warmup_steps"):
        sch.warmup_cosine_decay_schedule(0.0, 1.0, 5, 5)
    with pytest.raises(ValueError, match="non-negative"):
        sch.piecewise_constant_schedule(1.0, {2: -0.5})
    with pytest.raises(ValueError, match="'linear' or 'cosine'"):
        sch.piecewise_interpolate_schedule("cubic", 1.0)
    with pytest.raises(ValueError, match="transition_steps must be positive"):
        sch.cosine_onecycle_schedule(0, 1.0)
    with pytest.raises(ValueError, match="expected 1 boundaries"):
        sch.join_schedules([sch.constant_schedule(1.0)] * 2, [])
