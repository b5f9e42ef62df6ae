"""Type aliases used in signatures (TorchOpt's ``torchopt.typing`` names).

Example:
    >>> from diffopt.typing import Params, ScalarOrSchedule
    >>> Params
    typing.Any
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from diffopt.base import (
    EmptyState,
    GradientTransformation,
    OptState,
    Params,
    TransformInitFn,
    TransformUpdateFn,
    Updates,
)

__all__ = [
    "EmptyState",
    "GradientTransformation",
    "Numeric",
    "OptState",
    "Params",
    "Scalar",
    "ScalarOrSchedule",
    "Schedule",
    "TensorTree",
    "TransformInitFn",
    "TransformUpdateFn",
    "Updates",
]

Scalar = float | int
Numeric = torch.Tensor | Scalar
Schedule = Callable[[Numeric], Numeric]
ScalarOrSchedule = float | torch.Tensor | Schedule
TensorTree = Any  # a pytree whose leaves are tensors
