r"""Cosine schedules: cosine decay, with a linear warmup, and the one-cycle policy.

.. math::
    \eta(t) = \eta_0 \left((1 - \alpha) \left(\tfrac{1}{2}\left(1 + \cos\frac{\pi \min(t, T)}{T}
    \right)\right)^p + \alpha\right)

Example:
    >>> schedule = cosine_decay_schedule(1.0, decay_steps=4)
    >>> [round(schedule(t), 4) for t in range(6)]
    [1.0, 0.8536, 0.5, 0.1464, 0.0, 0.0]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

from diffopt.schedule import _ops
from diffopt.schedule.piecewise import join_schedules, piecewise_interpolate_schedule
from diffopt.schedule.polynomial import linear_schedule

__all__ = [
    "cosine_decay_schedule",
    "cosine_onecycle_schedule",
    "sgdr_schedule",
    "warmup_cosine_decay_schedule",
]


def cosine_decay_schedule(
    init_value: float, decay_steps: int, alpha: float = 0.0, exponent: float = 1.0
) -> Callable[[Any], Any]:
    """Decay ``init_value`` along a half cosine to ``alpha * init_value`` over ``decay_steps``.

    Loshchilov & Hutter, 2016 (SGDR, arXiv:1608.03983), without restarts.

    Args:
        init_value: the value at step 0.
        decay_steps: the number of steps to decay over (positive); the value stays at
            ``alpha * init_value`` afterwards.
        alpha: the final value as a fraction of ``init_value``.
        exponent: the power the cosine factor is raised to.

    Returns:
        A function of the step count: a float for a number, a float64 tensor for a tensor.

    Raises:
        ValueError: when ``decay_steps`` is not positive.

    Example:
        >>> import torch
        >>> schedule = cosine_decay_schedule(2.0, decay_steps=2, alpha=0.5)
        >>> [round(schedule(t), 6) for t in (0, 1, 2, 3)]
        [2.0, 1.5, 1.0, 1.0]
        >>> schedule(torch.tensor([0, 2]))
        tensor([2., 1.], dtype=torch.float64)
    """
    if not decay_steps > 0:
        raise ValueError(f"cosine_decay_schedule: decay_steps must be positive, got {decay_steps}")

    def schedule(count: Any) -> Any:
        t = _ops.clip(_ops.as_time(count), hi=float(decay_steps))
        cosine = 0.5 * (1 + _ops.cos(math.pi * t / decay_steps))
        return _ops.result(init_value * ((1 - alpha) * cosine**exponent + alpha), t)

    return schedule


def warmup_cosine_decay_schedule(
    init_value: float,
    peak_value: float,
    warmup_steps: int,
    decay_steps: int,
    end_value: float = 0.0,
    exponent: float = 1.0,
) -> Callable[[Any], Any]:
    """Rise linearly from ``init_value`` to ``peak_value``, then decay along a cosine.

    Args:
        init_value: the value at step 0.
        peak_value: the value reached after ``warmup_steps``.
        warmup_steps: the length of the linear warmup.
        decay_steps: the total length of warmup and decay, after which the value is
            ``end_value`` (must exceed ``warmup_steps``).
        end_value: the final value.
        exponent: the power the cosine factor is raised to.

    Returns:
        A function of the step count: a float for a number, a float64 tensor for a tensor.

    Raises:
        ValueError: when ``decay_steps`` does not exceed ``warmup_steps``.

    Example:
        >>> schedule = warmup_cosine_decay_schedule(0.0, 1.0, warmup_steps=2, decay_steps=4)
        >>> [round(schedule(t), 6) for t in range(6)]
        [0.0, 0.5, 1.0, 0.5, 0.0, 0.0]
    """
    if not decay_steps > warmup_steps:
        raise ValueError(
            f"warmup_cosine_decay_schedule: decay_steps ({decay_steps}) must exceed "
            f"warmup_steps ({warmup_steps})"
        )
    alpha = 0.0 if peak_value == 0.0 else end_value / peak_value
    return join_schedules(
        [
            linear_schedule(init_value, peak_value, transition_steps=warmup_steps),
            cosine_decay_schedule(peak_value, decay_steps - warmup_steps, alpha, exponent),
        ],
        [warmup_steps],
    )


def cosine_onecycle_schedule(
    transition_steps: int,
    peak_value: float,
    pct_start: float = 0.3,
    div_factor: float = 25.0,
    final_div_factor: float = 1e4,
) -> Callable[[Any], Any]:
    """The one-cycle policy (Smith & Topin, 2017, arXiv:1708.07120) with cosine annealing.

    The value rises from ``peak_value / div_factor`` to ``peak_value`` over the first
    ``int(pct_start * transition_steps)`` steps, then falls to
    ``peak_value / (div_factor * final_div_factor)`` at ``transition_steps``, both along half
    cosines, and stays there.

    Args:
        transition_steps: the length of the cycle (positive).
        peak_value: the highest value.
        pct_start: the fraction of the cycle spent rising.
        div_factor: ``peak_value`` over the initial value.
        final_div_factor: the initial value over the final one.

    Returns:
        A function of the step count: a float for a number, a float64 tensor for a tensor.

    Raises:
        ValueError: when ``transition_steps`` is not positive.

    Example:
        >>> schedule = cosine_onecycle_schedule(10, 2.0, pct_start=0.2, div_factor=4.0,
        ...                                     final_div_factor=2.0)
        >>> [round(schedule(t), 6) for t in (0, 1, 2, 6, 10, 11)]
        [0.5, 1.25, 2.0, 1.125, 0.25, 0.25]
    """
    if transition_steps <= 0:
        raise ValueError(
            f"cosine_onecycle_schedule: transition_steps must be positive, got {transition_steps}"
        )
    return piecewise_interpolate_schedule(
        "cosine",
        peak_value / div_factor,
        {
            int(pct_start * transition_steps): div_factor,
            int(transition_steps): 1.0 / (div_factor * final_div_factor),
        },
    )


def sgdr_schedule(cosine_kwargs: Iterable[dict[str, Any]]) -> Callable[[Any], Any]:
    """Warm restarts (SGDR, Loshchilov & Hutter, 2016): warmup-cosine cycles one after another.

    Args:
        cosine_kwargs: one dict of :func:`warmup_cosine_decay_schedule` arguments per cycle;
            each cycle lasts its ``decay_steps``.

    Returns:
        A function of the step count: a float for a number, a float64 tensor for a tensor.

    Example:
        >>> cycle = dict(init_value=0.0, peak_value=1.0, warmup_steps=1, decay_steps=3)
        >>> schedule = sgdr_schedule([cycle, cycle])
        >>> [round(schedule(t), 6) for t in range(7)]
        [0.0, 1.0, 0.5, 0.0, 1.0, 0.5, 0.0]
    """
    schedules, boundaries, step = [], [], 0
    for kwargs in cosine_kwargs:
        schedules.append(warmup_cosine_decay_schedule(**kwargs))
        step += kwargs["decay_steps"]
        boundaries.append(step)
    return join_schedules(schedules, boundaries[:-1])
