"""What every drop-in optimizer shares: the closure, the fallback test and dtype/device buckets."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.optim.optimizer import _get_scalar_dtype

__all__ = ["call_bucketed", "gather_zero_state", "new_step", "run_closure", "scalar",
           "torch_path_needed"]


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


def call_bucketed(op: Callable[..., Any], lists: list[list[Tensor]], real_lists: int,
                  kwargs: dict[str, Any]) -> None:
    """Calls a ``*_step_`` op once per (device, dtype) of ``lists[0]`` (the params).

    torch.optim's foreach path groups the same way, so a parameter group may mix devices and
    dtypes, while one op call requires a single device and dtype. Complex tensors are updated as
    their real views, exactly as torch.optim does; the first ``real_lists`` lists are viewed so
    (the rest, e.g. step counters, are passed through). Empty lists (absent optional state) stay
    empty.
    """
    params = lists[0]
    if not params:
        return
    kinds = {(p.device, p.dtype) for p in params}
    if len(kinds) == 1 and not next(iter(kinds))[1].is_complex:
        op(*lists, **kwargs)  # the common case: one call for the whole group
        return
    buckets: dict[tuple[torch.device, torch.dtype], list[list[Tensor]]] = {}
    for i, p in enumerate(params):
        real_dtype = p.real.dtype if p.is_complex() else p.dtype
        bucket = buckets.setdefault((p.device, real_dtype), [[] for _ in lists])
        for k, lst in enumerate(lists):
            if lst:
                t = lst[i]
                bucket[k].append(torch.view_as_real(t) if k < real_lists and t.is_complex() else t)
    for bucket in buckets.values():
        op(*bucket, **kwargs)


def gather_zero_state(optimizer: torch.optim.Optimizer, name: str,
                      buffers: tuple[str, ...]) -> list[tuple[dict[str, Any], list[list[Tensor]]]]:
    """Per param group: ``(group, [params, grads, *buffer lists, steps])`` for the parameters that
    have a gradient, for optimizers whose state is a step counter plus zero-initialised buffers
    (created lazily on first use, in torch.optim's key order). Sparse gradients are rejected before
    any state is touched in that parameter."""
    work = []
    for group in optimizer.param_groups:
        lists: list[list[Tensor]] = [[] for _ in range(len(buffers) + 3)]
        for p in group["params"]:
            grad = p.grad
            if grad is None:
                continue
            if grad.is_sparse:
                raise RuntimeError(f"{name} does not support sparse gradients")
            state = optimizer.state[p]
            if len(state) == 0:
                state["step"] = new_step()
                for key in buffers:
                    state[key] = torch.zeros_like(p, memory_format=torch.preserve_format)
            lists[0].append(p)
            lists[1].append(grad)
            for k, key in enumerate(buffers):
                lists[2 + k].append(state[key])
            lists[-1].append(state["step"])
        work.append((group, lists))
    return work
