"""The few operations the schedules need, on a Python number or on a step-count tensor.

Each schedule states its formula once with these: a number count gives a Python float, a tensor
count (perhaps batched by ``torch.func.vmap``) gives a float64 tensor from tensor ops alone.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def as_time(count: Any) -> Any:
    """The step count as a float64 tensor or a Python float."""
    if isinstance(count, torch.Tensor):
        return count.to(torch.float64)
    return float(count)


def cos(x: Any) -> Any:
    return torch.cos(x) if isinstance(x, torch.Tensor) else math.cos(x)


def clip(x: Any, lo: float | None = None, hi: float | None = None) -> Any:
    """``x`` clipped to ``[lo, hi]`` (either end may be ``None``)."""
    if isinstance(x, torch.Tensor):
        return torch.clamp(x, min=lo, max=hi)
    if lo is not None:
        x = max(x, lo)
    if hi is not None:
        x = min(x, hi)
    return x


def where(condition: Any, a: Any, b: Any) -> Any:
    """``a`` where ``condition`` holds, else ``b``; a tensor condition selects elementwise."""
    if isinstance(condition, torch.Tensor):

        def as_tensor(v: Any) -> torch.Tensor:
            if isinstance(v, torch.Tensor):
                return v
            return torch.tensor(v, dtype=torch.float64, device=condition.device)

        return torch.where(condition, as_tensor(a), as_tensor(b))
    return a if condition else b


def result(value: Any, t: Any) -> Any:
    """A float for a number count; a float64 tensor shaped like ``t`` for a tensor count."""
    if isinstance(t, torch.Tensor):
        if isinstance(value, torch.Tensor):
            return value.to(torch.float64).expand_as(t) if value.shape != t.shape else value
        return torch.full_like(t, float(value))
    return float(value)
