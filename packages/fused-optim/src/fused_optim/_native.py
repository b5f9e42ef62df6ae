"""fused-optim's compiled modules, loaded once: the ops (``_C``) and the optional fast path (``_eager``).

``fused_optim._C`` registers ``torch.ops.fused_optim`` through torch's stable C ABI and loads into
every torch from 2.10 on. ``fused_optim._eager`` holds each op's unboxed eager call
(csrc/eager_call.h), which skips the boxed ``torch.ops`` path; it links torch's version-specific
API and is imported only into the torch release it was compiled against (see ``_torch_abi``).
Elsewhere this module gives stand-ins with the same interface that always decline
(``NotImplemented``), so every caller takes ``torch.ops`` as it does for anything the unboxed call
declines: same results, more host time per call. ``EAGER_REASON`` says why the fast path is off;
the environment variable ``FUSED_OPTIM_EAGER=0`` turns it off.

The stable ABI leaves three things of an in-place op to this side (csrc/torch_api.h,
``InPlaceRefusal`` and ``BumpVersion``): refusing a tensor that requires grad under grad mode, refusing an inference
tensor outside inference mode, and bumping the version counters of what the op wrote. And type
errors cross torch's C boundary as ``RuntimeError("TypeError: ...")``. :func:`boxed` wraps an op's
``torch.ops`` overload with all of that; fused-optim's own calls go through it.
"""

from __future__ import annotations

import functools
import operator
import os
from collections.abc import Callable, Sequence
from typing import Any

import torch

from fused_optim import _C
from fused_optim._torch_abi import eager_matches

__all__ = ["BUILD_INFO", "EAGER", "EAGER_REASON", "boxed", "flatten_lists", "split_flat"]


def _load_eager() -> tuple[Any, str]:
    if os.environ.get("FUSED_OPTIM_EAGER") == "0":  # (tests run the suite on the stable path so)
        return None, "turned off by FUSED_OPTIM_EAGER=0"
    try:
        from fused_optim._built_against import TORCH_VERSION  # written by CMakeLists.txt
    except ImportError:
        return None, "this build has no record of the torch it was compiled against"
    if not eager_matches(TORCH_VERSION, torch.__version__):
        return None, f"compiled against torch {TORCH_VERSION}, torch {torch.__version__} is running"
    try:
        from fused_optim import _eager
    except ImportError as e:  # not built (FUSED_OPTIM_EAGER=OFF), or built for another CPython
        return None, f"fused_optim._eager did not import: {e}"
    return _eager, ""


_module, EAGER_REASON = _load_eager()


def _decline(*args: Any, **kwargs: Any) -> Any:
    return NotImplemented


def _split_flat(flat: tuple[Any, ...], sizes: Sequence[int]) -> tuple[list[Any], ...]:
    """``flat`` cut into consecutive lists of the given lengths (the fast path's C++ twin)."""
    if sum(sizes) != len(flat) or any(n < 0 for n in sizes):
        raise ValueError(f"_split_flat: the lengths {tuple(sizes)} do not fit a tuple of {len(flat)} items")
    out, start = [], 0
    for n in sizes:
        out.append(list(flat[start:start + n]))
        start += n
    return tuple(out)


# op name -> unboxed call (or a stand-in that declines); the helpers of the eager runner
# (fused_optim.ops._make_runner): flatten_lists returns None where the runner takes its general
# path, which the stand-in always does.
EAGER: dict[str, Callable[..., Any]]
flatten_lists: Callable[[Any], Any]
split_flat: Callable[[tuple[Any, ...], Sequence[int]], tuple[list[Any], ...]]
if _module is not None:
    EAGER, flatten_lists, split_flat = _module._eager, _module._flatten_lists, _module._split_flat
else:
    EAGER = dict.fromkeys(_C.OPS, _decline)
    flatten_lists, split_flat = (lambda lists: None), _split_flat

BUILD_INFO: dict[str, Any] = {**_C.BUILD_INFO, "eager": _module is not None}

_TYPE_ERROR = "TypeError: "  # what csrc/torch_api.h's FailType puts before a type error's message


def translated(error: RuntimeError) -> Exception:
    """The exception the op meant: a TypeError where the stable build marked one, else ``error``."""
    message = str(error)
    if message.startswith(_TYPE_ERROR):
        return TypeError(message[len(_TYPE_ERROR):])
    return error


def _written(op: torch._ops.OpOverload) -> list[tuple[int, str]]:
    """(position, name) of the tensor-list arguments an op writes (``Tensor(a!)[]``)."""
    return [(i, a.name) for i, a in enumerate(op._schema.arguments)
            if a.alias_info is not None and a.alias_info.is_write]


@functools.cache  # one wrapper per op, whoever asks (the DTensor handler asks on every call)
def boxed(op: torch._ops.OpOverload) -> Callable[..., Any]:
    """``op`` (a ``torch.ops.fused_optim`` overload) with what the stable ABI leaves to Python."""
    written = _written(op)
    where = str(op._schema.name)
    increment_version = torch._C._increment_version
    requires_grad, is_inference = operator.attrgetter("requires_grad"), torch.Tensor.is_inference

    if not written:
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return op(*args, **kwargs)
            except RuntimeError as e:
                raise translated(e) from None
        return call

    def lists(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
        return [(name, args[i] if i < len(args) else kwargs.get(name, ())) for i, name in written]

    def refuse(name: str, tensors: Any, grad_mode: bool, inference_mode: bool) -> None:
        for t, x in enumerate(tensors):
            if not isinstance(x, torch.Tensor):
                continue  # the op names it
            if grad_mode and x.requires_grad:
                raise RuntimeError(
                    f"{where}: {name}[{t}] requires grad and grad mode is enabled; an in-place step is not "
                    "differentiable: call it under torch.no_grad(), or use fused_optim.functional for a "
                    "differentiable update")
            if not inference_mode and x.is_inference():
                raise RuntimeError(
                    f"{where}: {name}[{t}] is an inference tensor; an in-place update to an inference tensor "
                    "outside InferenceMode is not allowed (clone() it first)")

    def call_in_place(*args: Any, **kwargs: Any) -> Any:
        targets = lists(args, kwargs)
        grad_mode, inference_mode = torch.is_grad_enabled(), torch.is_inference_mode_enabled()
        if grad_mode or not inference_mode:
            # The common case (no offender) as C-level passes, no Python code per tensor (a step on
            # hundreds of tensors spent most of its host time here); the loop finds the offender.
            for name, tensors in targets:
                try:
                    clean = not ((grad_mode and any(map(requires_grad, tensors)))
                                 or (not inference_mode and any(map(is_inference, tensors))))
                except (TypeError, AttributeError):  # something not a tensor in the list
                    clean = False
                if not clean:
                    refuse(name, tensors, grad_mode, inference_mode)
        try:
            result = op(*args, **kwargs)
        except RuntimeError as e:
            raise translated(e) from None
        # Nothing was written where found_inf (on the CPU: readable without waiting, here without a
        # dispatcher call either, as the C++ reads it) skipped the step.
        found_inf = kwargs.get("found_inf")
        if found_inf is None or found_inf.device.type != "cpu" or not found_inf.detach().numpy().any():
            for _, tensors in targets:  # (an inference tensor has no counter: left as it is)
                if tensors:
                    increment_version(tensors)
        return result

    return call_in_place
