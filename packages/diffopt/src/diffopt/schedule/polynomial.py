r"""Polynomial (and linear) interpolation schedules.

.. math::
    \eta(t) = (\eta_0 - \eta_1)\left(1 - \frac{\min(\max(t - t_0, 0), T)}{T}\right)^p + \eta_1

Example:
    >>> schedule = linear_schedule(1.0, 0.0, transition_steps=4)
    >>> [schedule(t) for t in range(6)]
    [1.0, 0.75, 0.5, 0.25, 0.0, 0.0]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["linear_schedule", "polynomial_schedule", "warmup_constant_schedule"]


def polynomial_schedule(init_value: float, end_value: float, power: float,
                        transition_steps: int,
                        transition_begin: int = 0) -> Callable[[Any], float]:
    """Go from ``init_value`` to ``end_value`` over ``transition_steps`` steps along ``(1-x)^power``.

    Args:
        init_value: value before and at ``transition_begin``.
        end_value: value after ``transition_begin + transition_steps``.
        power: exponent of the polynomial.
        transition_steps: length of the transition (``<= 0`` means constant ``init_value``).
        transition_begin: steps to hold ``init_value`` first.

    Returns:
        A function of the step count returning a float for an int, and a float64 tensor computed
        with tensor ops (no Python read, so it works under ``torch.func.vmap``) for a tensor.

    Example:
        >>> schedule = polynomial_schedule(1.0, 0.0, power=2, transition_steps=2)
        >>> [schedule(t) for t in range(3)]
        [1.0, 0.25, 0.0]
        >>> import torch
        >>> schedule(torch.tensor([0, 1, 2]))
        tensor([1.0000, 0.2500, 0.0000], dtype=torch.float64)
    """
    if transition_begin < 0:
        raise ValueError(f"polynomial_schedule: transition_begin must be >= 0, "
                         f"got {transition_begin}")
    if transition_steps <= 0:
        return lambda count: (torch.full_like(count, init_value, dtype=torch.float64)
                              if isinstance(count, torch.Tensor) else float(init_value))

    def schedule(count: Any) -> Any:
        if isinstance(count, torch.Tensor):  # a step-count tensor, perhaps batched by vmap
            t = torch.clamp(count.to(torch.float64) - transition_begin, 0, transition_steps)
            return (init_value - end_value) * (1.0 - t / transition_steps) ** power + end_value
        t = min(max(int(count) - transition_begin, 0), transition_steps)
        frac = 1.0 - t / transition_steps
        return float((init_value - end_value) * frac**power + end_value)

    return schedule


def linear_schedule(init_value: float, end_value: float, transition_steps: int,
                    transition_begin: int = 0) -> Callable[[Any], float]:
    """Go linearly from ``init_value`` to ``end_value`` over ``transition_steps`` steps.

    This is :func:`polynomial_schedule` with ``power=1``.

    Args:
        init_value: value before and at ``transition_begin``.
        end_value: value after ``transition_begin + transition_steps``.
        transition_steps: length of the transition (``<= 0`` means constant ``init_value``).
        transition_begin: steps to hold ``init_value`` first.

    Returns:
        A function of the step count (an int or an integer tensor) returning a float.

    Example:
        >>> schedule = linear_schedule(0.0, 1.0, transition_steps=10, transition_begin=5)
        >>> [schedule(t) for t in (0, 5, 10, 15, 100)]
        [0.0, 0.0, 0.5, 1.0, 1.0]
    """
    return polynomial_schedule(init_value, end_value, 1, transition_steps, transition_begin)


def warmup_constant_schedule(init_value: float, peak_value: float,
                             warmup_steps: int) -> Callable[[Any], float]:
    """Rise linearly from ``init_value`` to ``peak_value`` over ``warmup_steps``, then hold.

    This is :func:`linear_schedule` from ``init_value`` to ``peak_value``.

    Args:
        init_value: the value at step 0.
        peak_value: the value from ``warmup_steps`` on.
        warmup_steps: the length of the warmup.

    Returns:
        A function of the step count: a float for a number, a float64 tensor for a tensor.

    Example:
        >>> [warmup_constant_schedule(0.0, 1.0, warmup_steps=4)(t) for t in (0, 2, 4, 9)]
        [0.0, 0.5, 1.0, 1.0]
    """
    return linear_schedule(init_value, peak_value, transition_steps=warmup_steps)
