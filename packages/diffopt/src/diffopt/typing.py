"""Type aliases used in signatures (TorchOpt's ``torchopt.typing`` names).

They are plain aliases for annotations: ``Params``, ``Updates``, ``OptState`` and the ``*Tree``
names are pytrees (``Any`` to a type checker), ``TensorContainer`` is a module's name -> tensor
table (``named_parameters``-like) and ``ModuleTensorContainers`` a tuple of them,
``LinearSolver`` is ``solve(matvec, b) -> x`` as in :mod:`diffopt.linear_solve`, ``Device`` is
anything :class:`torch.device` accepts, and ``SampleFunc`` / :class:`Samplable` are the noise
sources of :func:`diffopt.diff.zero_order.zero_order`. ``RRef`` is
:class:`torch.distributed.rpc.RRef` (``None`` in a PyTorch built without RPC).

Example:
    >>> import torch
    >>> from diffopt.typing import Device, Params, Samplable, ScalarOrSchedule, TensorContainer
    >>> Params
    typing.Any
    >>> isinstance(torch.distributions.Normal(0.0, 1.0), Samplable)
    True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed.rpc as _rpc
from torch import Tensor
from torch.distributions import Distribution
from torch.futures import Future

from diffopt.base import (
    ChainedGradientTransformation,
    EmptyState,
    GradientTransformation,
    OptState,
    Params,
    TransformInitFn,
    TransformUpdateFn,
    UninitializedState,
    Updates,
)
from diffopt.diff.zero_order.decorator import Samplable
from optree_core.typing import PyTree

__all__ = [
    "ChainedGradientTransformation",
    "Device",
    "Distribution",
    "EmptyState",
    "Future",
    "GradientTransformation",
    "LinearSolver",
    "ListOfOptionalTensors",
    "ListOfTensors",
    "ModuleTensorContainers",
    "Numeric",
    "OptState",
    "OptionalTensor",
    "OptionalTensorOrOptionalTensors",
    "OptionalTensorTree",
    "Params",
    "PyTree",
    "RRef",
    "Samplable",
    "SampleFunc",
    "Scalar",
    "ScalarOrSchedule",
    "Schedule",
    "SequenceOfOptionalTensors",
    "SequenceOfTensors",
    "Size",
    "Tensor",
    "TensorContainer",
    "TensorOrTensors",
    "TensorTree",
    "TransformInitFn",
    "TransformUpdateFn",
    "TupleOfOptionalTensors",
    "TupleOfTensors",
    "UninitializedState",
    "Updates",
]

Device = torch.device | str | int
Size = torch.Size

Scalar = float | int | bool
Numeric = Tensor | Scalar
Schedule = Callable[[Numeric], Numeric]
ScalarOrSchedule = float | Tensor | Schedule

OptionalTensor = Tensor | None
ListOfTensors = list[Tensor]
TupleOfTensors = tuple[Tensor, ...]
SequenceOfTensors = Sequence[Tensor]
TensorOrTensors = Tensor | SequenceOfTensors
ListOfOptionalTensors = list[OptionalTensor]
TupleOfOptionalTensors = tuple[OptionalTensor, ...]
SequenceOfOptionalTensors = Sequence[OptionalTensor]
OptionalTensorOrOptionalTensors = OptionalTensor | SequenceOfOptionalTensors
TensorTree = Any  # a pytree whose leaves are tensors
OptionalTensorTree = Any  # a pytree whose leaves are tensors or None

TensorContainer = dict[str, Tensor | None]
ModuleTensorContainers = tuple[TensorContainer, ...]

LinearSolver = Callable[[Callable[[TensorTree], TensorTree], TensorTree], TensorTree]
SampleFunc = Callable[[Size], Tensor | Sequence[Numeric]]

# torch built without distributed support has no RRef; keep the name importable.
RRef = _rpc.RRef if _rpc.is_available() else None
