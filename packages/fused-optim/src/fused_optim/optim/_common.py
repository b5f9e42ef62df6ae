"""What every drop-in optimizer shares: the closure, the fallback test and dtype/device buckets."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.optim.optimizer import _get_scalar_dtype

__all__ = ["StepPlan", "bucket_lists", "gather_zero_state", "new_step", "run_closure", "scalar",
           "torch_path_needed"]


def run_closure(closure: Callable[[], Any] | None) -> Any:
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


def torch_path_needed(optimizer: torch.optim.Optimizer) -> bool:
    """``differentiable=True`` and, for CUDA parameters, ``capturable=True`` are torch.optim
    features outside a fused kernel's reach (autograd through in-place updates, CUDA-graph
    capture): such groups run torch.optim's own implementation, so the class still accepts every
    torch argument."""
    for group in optimizer.param_groups:
        if group.get("differentiable"):
            return True
        # capturable asks for no host synchronisation, which CPU parameters never need (and
        # torch.compile sets it on every group): only CUDA graph capture needs torch's path.
        if group.get("capturable") and any(p.device.type != "cpu" for p in group["params"]):
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


def bucket_lists(lists: list[list[Tensor]], real_lists: int) -> list[list[list[Tensor]]]:
    """Splits one group's op arguments by (device, dtype) of ``lists[0]`` (the params).

    torch.optim's foreach path groups the same way, so a parameter group may mix devices and
    dtypes, while one op call requires a single device and dtype. Complex tensors are updated as
    their real views, exactly as torch.optim does; the first ``real_lists`` lists are viewed so
    (the rest, e.g. step counters, are passed through). Empty lists (absent optional state) stay
    empty, and a group without params gives no call.
    """
    params = lists[0]
    if not params:
        return []
    kinds = {(p.device, p.dtype) for p in params}
    if len(kinds) == 1 and not next(iter(kinds))[1].is_complex:
        return [lists]  # the common case: one call for the whole group
    buckets: dict[tuple[torch.device, torch.dtype], list[list[Tensor]]] = {}
    for i, p in enumerate(params):
        real_dtype = p.real.dtype if p.is_complex() else p.dtype
        bucket = buckets.setdefault((p.device, real_dtype), [[] for _ in lists])
        for k, lst in enumerate(lists):
            if lst:
                t = lst[i]
                bucket[k].append(torch.view_as_real(t) if k < real_lists and t.is_complex() else t)
    return list(buckets.values())


class StepPlan:
    """The op calls of one optimizer step, checked together before the first one runs.

    Each op call checks all its arguments before it modifies anything, but a step makes one call
    per parameter group (and per device and dtype), so a bad second group (a learning rate set to
    -1, a state tensor of the wrong shape from ``load_state_dict``, a parameter listed twice)
    would otherwise be found after the first group was updated. When there is more than one call,
    each is first checked here: its hyper-parameters by the op itself on an empty tensor, its
    tensors against the params. State created lazily for this step is forgotten again if the step
    fails (SGD's fresh momentum buffers are uninitialized until their call runs): use it as a
    context manager around gathering the state and :meth:`run`.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, name: str) -> None:
        self._optimizer = optimizer
        self._name = name
        self._calls: list[tuple[Callable[..., Any], list[list[Tensor]], dict[str, Any], bool]] = []
        self._new_state: dict[int, tuple[Tensor, tuple[str, ...]]] = {}

    def note_new_state(self, param: Tensor, *keys: str) -> None:
        """Records that this step created ``param``'s state (only ``keys`` of it, when given)."""
        self._new_state[id(param)] = (param, keys)

    def add(self, op: Callable[..., Any], lists: list[list[Tensor]], real_lists: int, kwargs: dict[str, Any],
            has_steps: bool = True) -> None:
        """Adds the calls of one group (``has_steps``: the last list holds the step counters)."""
        for bucket in bucket_lists(lists, real_lists):
            self._calls.append((op, bucket, kwargs, has_steps))

    def __enter__(self) -> StepPlan:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: Any) -> None:
        if kind is not None:  # forget the state created for calls that did not run
            state = self._optimizer.state
            for param, keys in self._new_state.values():
                if not keys:
                    state.pop(param, None)
                elif param in state:
                    for key in keys:
                        state[param].pop(key, None)
                    if not state[param]:
                        del state[param]
        self._new_state.clear()

    def run(self) -> None:
        if len(self._calls) > 1:
            self._check_duplicates()
            for op, lists, kwargs, has_steps in self._calls:
                self._check_call(op, lists, kwargs, has_steps)
        for op, lists, kwargs, _ in self._calls:
            op(*lists, **kwargs)
            if self._new_state:  # only on a step that created state: keep the common step lean
                for p in lists[0]:  # this state is now in use
                    self._new_state.pop(id(_original(p)), None)

    def _check_duplicates(self) -> None:
        seen: set[tuple[int, int, tuple[int, ...], tuple[int, ...]]] = set()
        for _, lists, _, _ in self._calls:
            for p in lists[0]:
                if p.numel() == 0:
                    continue
                where = (p.untyped_storage().data_ptr(), p.storage_offset(), tuple(p.shape), tuple(p.stride()))
                if where in seen:
                    raise ValueError(f"{self._name}: the same parameter appears twice in the parameter groups "
                                     "(each parameter must be listed once)")
                seen.add(where)

    def _check_call(self, op: Callable[..., Any], lists: list[list[Tensor]], kwargs: dict[str, Any],
                    has_steps: bool) -> None:
        params = lists[0]
        name = self._name
        tensor_lists = lists[:-1] if has_steps else lists
        shapes = [p.shape for p in params]
        dtype, device = params[0].dtype, params[0].device
        for k, lst in enumerate(tensor_lists[1:], start=1):
            for i, t in enumerate(lst):
                if t.layout != torch.strided or t.dtype != dtype or t.device != device or t.shape != shapes[i]:
                    raise ValueError(
                        f"{name}: a state or gradient tensor (list {k}, entry {i}) has shape {tuple(t.shape)}, "
                        f"dtype {t.dtype}, layout {t.layout} and device {t.device} but its parameter has shape "
                        f"{tuple(shapes[i])}, dtype {dtype} and device {device}; was the state loaded for other "
                        "parameters?")
        if has_steps:
            for i, s in enumerate(lists[-1]):
                if s.numel() != 1 or (not s.is_floating_point() and s.dtype not in (torch.int64, torch.int32)):
                    raise ValueError(f"{name}: state 'step' of entry {i} must be a one-element float tensor, "
                                     f"got {s.dtype} {tuple(s.shape)}")
                value = float(s)
                if not math.isfinite(value) or value < 0:
                    raise ValueError(f"{name}: state 'step' of entry {i} is {value}; a step counter must be a "
                                     "finite count >= 0")
        # The op's own hyper-parameter checks, on a zero-element stand-in for every list.
        dummy = torch.empty(0, dtype=dtype, device=device)
        stand_in = [[dummy] if lst else [] for lst in tensor_lists]
        if has_steps:
            stand_in.append([torch.zeros((), dtype=torch.float32)])
        op(*stand_in, **kwargs)


def _original(t: Tensor) -> Tensor:
    """The complex parameter behind a real view made by :func:`bucket_lists` (else ``t``)."""
    base = t._base
    return base if base is not None and base.is_complex() else t


def gather_zero_state(optimizer: torch.optim.Optimizer, name: str, buffers: tuple[str, ...],
                      plan: StepPlan | None = None) -> list[tuple[dict[str, Any], list[list[Tensor]]]]:
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
                if plan is not None:
                    plan.note_new_state(p)
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
