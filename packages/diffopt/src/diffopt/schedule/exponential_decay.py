r"""Exponential decay schedule.

.. math::
    \eta(t) = \eta_0 \, r^{(t - t_0)/T} \quad (t \ge t_0), \qquad \eta(t) = \eta_0 \quad (t < t_0)

with the exponent floored when ``staircase=True`` and the result clipped at ``end_value``.

Example:
    >>> schedule = exponential_decay(1.0, decay_rate=0.5, transition_steps=2, staircase=True)
    >>> [schedule(t) for t in range(5)]
    [1.0, 1.0, 0.5, 0.5, 0.25]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["exponential_decay", "warmup_exponential_decay_schedule"]


def exponential_decay(init_value: float, decay_rate: float, transition_begin: int = 0,
                      transition_steps: int = 1, staircase: bool = False,
                      end_value: float | None = None) -> Callable[[Any], float]:
    """Multiply ``init_value`` by ``decay_rate`` every ``transition_steps`` steps.

    Args:
        init_value: the initial value.
        decay_rate: the factor per ``transition_steps`` steps (``< 1`` decays, ``> 1`` grows).
        transition_begin: steps to hold ``init_value`` first.
        transition_steps: steps per factor of ``decay_rate``; must be positive.
        staircase: decay in discrete jumps instead of continuously.
        end_value: a floor (when decaying) or ceiling (when growing) for the value.

    Returns:
        A function of the step count returning a float for an int, and a float64 tensor computed
        with tensor ops (no Python read, so it works under ``torch.func.vmap``) for a tensor.

    Example:
        >>> exponential_decay(1.0, 0.1, transition_steps=10, end_value=0.5)(100)
        0.5
        >>> import torch
        >>> exponential_decay(1.0, 0.5, transition_steps=2, staircase=True)(torch.tensor([1, 4]))
        tensor([1.0000, 0.2500], dtype=torch.float64)
    """
    if transition_steps <= 0:
        raise ValueError(f"exponential_decay: transition_steps must be positive, "
                         f"got {transition_steps}")
    if decay_rate == 0.0:
        raise ValueError("exponential_decay: decay_rate must not be 0")
    if transition_begin < 0:
        raise ValueError(f"exponential_decay: transition_begin must be >= 0, "
                         f"got {transition_begin}")

    def schedule(count: Any) -> Any:
        if isinstance(count, torch.Tensor):  # a step-count tensor, perhaps batched by vmap
            power = torch.clamp(count.to(torch.float64) - transition_begin, min=0)
            power = power / transition_steps
            if staircase:
                power = torch.floor(power)
            value = init_value * torch.pow(decay_rate, power)
            if end_value is not None:
                value = (torch.clamp(value, min=end_value) if decay_rate < 1
                         else torch.clamp(value, max=end_value))
            return value
        t = max(int(count) - transition_begin, 0)
        power = t / transition_steps
        if staircase:
            power = math.floor(power)
        value = init_value * decay_rate**power
        if end_value is not None:
            value = max(value, end_value) if decay_rate < 1 else min(value, end_value)
        return float(value)

    return schedule


def warmup_exponential_decay_schedule(init_value: float, peak_value: float, warmup_steps: int,
                                      transition_steps: int, decay_rate: float,
                                      transition_begin: int = 0, staircase: bool = False,
                                      end_value: float | None = None) -> Callable[[Any], Any]:
    """Rise linearly from ``init_value`` to ``peak_value``, then decay exponentially.

    After ``warmup_steps`` the value is :func:`exponential_decay` from ``peak_value``, counted
    from the end of the warmup.

    Args:
        init_value: the value at step 0.
        peak_value: the value at the end of the warmup.
        warmup_steps: the length of the linear warmup.
        transition_steps: steps per factor of ``decay_rate``; must be positive.
        decay_rate: the factor per ``transition_steps`` steps.
        transition_begin: steps after the warmup to hold ``peak_value``.
        staircase: decay in discrete jumps.
        end_value: a floor (or ceiling) for the decayed value.

    Returns:
        A function of the step count: a float for a number, a float64 tensor for a tensor.

    Example:
        >>> schedule = warmup_exponential_decay_schedule(0.0, 1.0, warmup_steps=2,
        ...                                              transition_steps=1, decay_rate=0.5)
        >>> [schedule(t) for t in range(5)]
        [0.0, 0.5, 1.0, 0.5, 0.25]
    """
    from diffopt.schedule.piecewise import join_schedules
    from diffopt.schedule.polynomial import linear_schedule

    return join_schedules(
        [linear_schedule(init_value, peak_value, transition_steps=warmup_steps),
         exponential_decay(peak_value, decay_rate, transition_begin, transition_steps, staircase,
                           end_value)],
        [warmup_steps],
    )
