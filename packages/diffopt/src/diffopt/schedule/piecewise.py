"""Piecewise schedules: constant, piecewise constant or interpolated, joined, linear one-cycle.

Example:
    >>> schedule = piecewise_constant_schedule(1.0, {2: 0.5, 4: 0.5})
    >>> [schedule(t) for t in range(6)]
    [1.0, 1.0, 0.5, 0.5, 0.25, 0.25]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch

from diffopt.schedule import _ops

__all__ = [
    "constant_schedule",
    "join_schedules",
    "linear_onecycle_schedule",
    "piecewise_constant_schedule",
    "piecewise_interpolate_schedule",
]


def constant_schedule(value: float) -> Callable[[Any], Any]:
    """The same value at every step.

    Args:
        value: the value.

    Returns:
        A function of the step count: a float for a number, a float64 tensor for a tensor.

    Example:
        >>> import torch
        >>> constant_schedule(0.5)(7), constant_schedule(0.5)(torch.tensor([0, 1]))
        (0.5, tensor([0.5000, 0.5000], dtype=torch.float64))
    """

    def schedule(count: Any) -> Any:
        return _ops.result(value, _ops.as_time(count))

    return schedule


def _sorted_scales(name: str, boundaries_and_scales: dict[int, float] | None) -> list:
    items = sorted((boundaries_and_scales or {}).items())
    if any(not scale >= 0.0 for _, scale in items):
        raise ValueError(
            f"{name}: the scale factors must be non-negative, got {boundaries_and_scales}"
        )
    return items


def piecewise_constant_schedule(
    init_value: float, boundaries_and_scales: dict[int, float] | None = None
) -> Callable[[Any], Any]:
    """``init_value`` multiplied by each ``scale`` whose ``boundary`` the step count has reached.

    Args:
        init_value: the value before the first boundary.
        boundaries_and_scales: a dict from step counts to the factors that apply from there on.

    Returns:
        A function of the step count: a float for a number, a float64 tensor for a tensor.

    Raises:
        ValueError: when a scale is negative.

    Example:
        >>> import torch
        >>> piecewise_constant_schedule(2.0, {3: 0.5})(torch.tensor([2, 3]))
        tensor([2., 1.], dtype=torch.float64)
    """
    items = _sorted_scales("piecewise_constant_schedule", boundaries_and_scales)

    def schedule(count: Any) -> Any:
        t = _ops.as_time(count)
        value: Any = init_value
        for boundary, scale in items:
            value = _ops.where(t >= boundary, value * scale, value)
        return _ops.result(value, t)

    return schedule


def _interpolate(kind: str, start: float, end: float, pct: Any) -> Any:
    if kind == "linear":
        return start + pct * (end - start)
    return end + (start - end) * 0.5 * (1 + _ops.cos(math.pi * pct))


def piecewise_interpolate_schedule(
    interpolate_type: str, init_value: float, boundaries_and_scales: dict[int, float] | None = None
) -> Callable[[Any], Any]:
    """Interpolate between values that change by a factor at each boundary.

    The value at boundary ``b_i`` is ``init_value`` times the scales up to ``b_i``; between two
    boundaries (and from step 0 to the first) it moves linearly or along a half cosine, and after
    the last boundary it stays.

    Args:
        interpolate_type: ``'linear'`` or ``'cosine'``.
        init_value: the value at step 0.
        boundaries_and_scales: a dict from step counts to the factors reached there.

    Returns:
        A function of the step count: a float for a number, a float64 tensor for a tensor.

    Raises:
        ValueError: for another ``interpolate_type`` or a negative scale.

    Example:
        >>> schedule = piecewise_interpolate_schedule('linear', 1.0, {4: 3.0, 6: 0.5})
        >>> [schedule(t) for t in (0, 2, 4, 5, 6, 9)]
        [1.0, 2.0, 3.0, 2.25, 1.5, 1.5]
    """
    if interpolate_type not in ("linear", "cosine"):
        raise ValueError(
            f"piecewise_interpolate_schedule: interpolate_type must be 'linear' or "
            f"'cosine', got {interpolate_type!r}"
        )
    items = _sorted_scales("piecewise_interpolate_schedule", boundaries_and_scales)
    bounds = [0] + [b for b, _ in items]
    values = [float(init_value)]
    for _, scale in items:
        values.append(values[-1] * scale)

    def schedule(count: Any) -> Any:
        t = _ops.as_time(count)
        value: Any = values[-1]  # at and after the last boundary
        for i in reversed(range(len(bounds) - 1)):
            lo, hi = bounds[i], bounds[i + 1]
            pct = (t - lo) / max(hi - lo, 1)
            inside = (t >= lo) & (t < hi) if not isinstance(t, float) else lo <= t < hi
            value = _ops.where(
                inside, _interpolate(interpolate_type, values[i], values[i + 1], pct), value
            )
        return _ops.result(value, t)

    return schedule


def linear_onecycle_schedule(
    transition_steps: int,
    peak_value: float,
    pct_start: float = 0.3,
    pct_final: float = 0.85,
    div_factor: float = 25.0,
    final_div_factor: float = 1e4,
) -> Callable[[Any], Any]:
    """The one-cycle policy (Smith & Topin, 2017, arXiv:1708.07120) with linear pieces.

    From ``peak_value / div_factor`` up to ``peak_value`` at ``int(pct_start * transition_steps)``,
    back down at ``int(pct_final * transition_steps)``, then to
    ``peak_value / (div_factor * final_div_factor)`` at ``transition_steps``.

    Args:
        transition_steps: the length of the cycle (positive).
        peak_value: the highest value.
        pct_start: the fraction of the cycle spent rising.
        pct_final: the fraction of the cycle after which the value falls below the initial one.
        div_factor: ``peak_value`` over the initial value.
        final_div_factor: the initial value over the final one.

    Returns:
        A function of the step count: a float for a number, a float64 tensor for a tensor.

    Raises:
        ValueError: when ``transition_steps`` is not positive.

    Example:
        >>> schedule = linear_onecycle_schedule(10, 4.0, pct_start=0.2, pct_final=0.6,
        ...                                     div_factor=2.0, final_div_factor=4.0)
        >>> [schedule(t) for t in (0, 1, 2, 4, 6, 8, 10)]
        [2.0, 3.0, 4.0, 3.0, 2.0, 1.25, 0.5]
    """
    if transition_steps <= 0:
        raise ValueError(
            f"linear_onecycle_schedule: transition_steps must be positive, got {transition_steps}"
        )
    return piecewise_interpolate_schedule(
        "linear",
        peak_value / div_factor,
        {
            int(pct_start * transition_steps): div_factor,
            int(pct_final * transition_steps): 1.0 / div_factor,
            transition_steps: 1.0 / final_div_factor,
        },
    )


def join_schedules(
    schedules: Sequence[Callable[[Any], Any]], boundaries: Sequence[int]
) -> Callable[[Any], Any]:
    """Run ``schedules`` one after the other, switching at ``boundaries``.

    From ``boundaries[i - 1]`` on, ``schedules[i]`` runs, called with the steps since that
    boundary.

    Args:
        schedules: the schedules, in order.
        boundaries: the step counts at which the next schedule takes over (one fewer than
            ``schedules``).

    Returns:
        A function of the step count: a float for a number, a float64 tensor for a tensor.

    Raises:
        ValueError: when the lengths do not fit.

    Example:
        >>> from diffopt.schedule import linear_schedule
        >>> schedule = join_schedules([constant_schedule(1.0),
        ...                            linear_schedule(1.0, 0.0, transition_steps=2)], [3])
        >>> [schedule(t) for t in range(6)]
        [1.0, 1.0, 1.0, 1.0, 0.5, 0.0]
    """
    schedules, boundaries = list(schedules), list(boundaries)
    if len(boundaries) != len(schedules) - 1:
        raise ValueError(
            f"join_schedules: expected {len(schedules) - 1} boundaries for "
            f"{len(schedules)} schedules, got {len(boundaries)}"
        )

    def schedule(count: Any) -> Any:
        if not isinstance(count, torch.Tensor):  # run only the schedule that applies
            index = sum(count >= b for b in boundaries)
            start = boundaries[index - 1] if index else 0
            return float(schedules[index](count - start))
        value = schedules[0](count)
        for boundary, following in zip(boundaries, schedules[1:]):
            value = _ops.where(count < boundary, value, following(count - boundary))
        return _ops.result(value, _ops.as_time(count))

    return schedule
