"""What every drop-in optimizer shares: the closure, the fallback test and dtype/device buckets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.optim.optimizer import _get_scalar_dtype

__all__ = ["Buckets", "new_step", "run_closure", "scalar", "torch_path_needed"]


def run_closure(closure: Callable[[], Any] | None) -> Any:
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


def torch_path_needed(optimizer: torch.optim.Optimizer) -> bool:
    """``differentiable=True`` and ``capturable=True`` are torch.optim features outside a fused
    kernel's reach (autograd through in-place updates, CUDA-graph capture): such groups run
    torch.optim's own implementation, so the class still accepts every torch argument."""
    for group in optimizer.param_groups:
        if group.get("differentiable") or group.get("capturable"):
            return True
        lr = group.get("lr")
        if isinstance(lr, Tensor) and lr.requires_grad:
            return True
    return False


def scalar(value: Any) -> float:
    """A hyper-parameter as a Python float (torch.optim allows tensors for lr and betas)."""
    return float(value.item()) if isinstance(value, Tensor) else float(value)


def new_step() -> Tensor:
    """torch.optim's fresh step counter: a CPU scalar of the default float type."""
    return torch.tensor(0.0, dtype=_get_scalar_dtype())


def real(t: Tensor) -> Tensor:
    """Complex tensors are updated as their real view, exactly as torch.optim does."""
    return torch.view_as_real(t) if t.is_complex() else t


class Buckets:
    """Lists of tensors grouped by (device, dtype): one kernel call per bucket.

    torch.optim's foreach path groups the same way, so a parameter group may mix devices and
    dtypes; within one op call the kernels require a single device and dtype.
    """

    def __init__(self, num_lists: int) -> None:
        self.num_lists = num_lists
        self._buckets: dict[tuple[torch.device, torch.dtype], list[list[Any]]] = {}

    def add(self, *tensors: Any) -> None:
        key = (tensors[0].device, tensors[0].dtype)
        lists = self._buckets.get(key)
        if lists is None:
            lists = self._buckets[key] = [[] for _ in range(self.num_lists)]
        for lst, t in zip(lists, tensors):
            lst.append(t)

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._buckets.values())

    def __bool__(self) -> bool:
        return bool(self._buckets)
