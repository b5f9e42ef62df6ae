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
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import torch

from fused_optim import _C
from fused_optim._torch_abi import eager_matches

__all__ = ["BUILD_INFO", "EAGER", "EAGER_REASON", "KeptStep", "UnboxedKeptStep", "boxed", "check_in_place", "flatten_lists", "split_flat"]


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
# path, which the stand-in always does; and the step reuse's pass over a group (_C's, which reads
# each gradient through Python's getter, where the fast path reads it from the tensor).
EAGER: dict[str, Callable[..., Any]]
flatten_lists: Callable[[Any], Any]
split_flat: Callable[[tuple[Any, ...], Sequence[int]], tuple[list[Any], ...]]
grads_if_same: Callable[[Any, list[Any]], list[Any] | None]
if _module is not None:
    EAGER, flatten_lists, split_flat = _module._eager, _module._flatten_lists, _module._split_flat
    grads_if_same = _module._grads_if_same
else:
    EAGER = dict.fromkeys(_C.OPS, _decline)
    flatten_lists, split_flat = (lambda lists: None), _split_flat
    grads_if_same = _C._grads_if_same

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


def _writes(name: str, grad_scale: Any) -> bool:
    """Whether an in-place step writes its list ``name``: every list its schema marks as written,
    but the gradients only where a ``grad_scale`` is given (the kernel stores them unscaled; without
    one it only reads them, so an inference tensor or one that requires grad may be a gradient)."""
    return name != "grads" or grad_scale is not None


def _refuse(where: str, name: str, tensors: Any, grad_mode: bool, inference_mode: bool) -> None:
    """Raises for the first tensor of ``tensors`` an in-place step may not write."""
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


_requires_grad, _is_inference = operator.attrgetter("requires_grad"), torch.Tensor.is_inference


def check_in_place(where: str, targets: list[tuple[str, Any]]) -> None:
    """The refusals torch makes for an in-place op, which the stable ABI leaves to Python: a list
    to be written holds a tensor that requires grad (in grad mode) or an inference tensor (outside
    inference mode). ``targets``: (argument name, tensors) of the lists the op writes."""
    grad_mode, inference_mode = torch.is_grad_enabled(), torch.is_inference_mode_enabled()
    if not grad_mode and inference_mode:
        return
    # The common case (no offender) as C-level passes, no Python code per tensor (a step on
    # hundreds of tensors spent most of its host time here); the loop finds the offender.
    for name, tensors in targets:
        try:
            clean = not ((grad_mode and any(map(_requires_grad, tensors)))
                         or (not inference_mode and any(map(_is_inference, tensors))))
        except (TypeError, AttributeError):  # something not a tensor in the list
            clean = False
        if not clean:
            _refuse(where, name, tensors, grad_mode, inference_mode)


def _written_unless_skipped(found_inf: torch.Tensor | None) -> bool:
    """Whether a step with this ``found_inf`` may have written: not where a CPU flag (readable
    without waiting, here without a dispatcher call either, as the C++ reads it) skipped it."""
    return found_inf is None or found_inf.device.type != "cpu" or not found_inf.detach().numpy().any()


def _bump_versions(lists: Sequence[Sequence[torch.Tensor]]) -> None:
    """Bumps the version counter of every tensor of ``lists`` (an op wrote them), as ATen's in-place
    ops do, so that autograd notices a saved tensor changed. (An inference tensor has no counter:
    left as it is.)"""
    for tensors in lists:
        if tensors:
            torch._C._increment_version(tensors)


@functools.cache  # one wrapper per op, whoever asks (the DTensor handler asks on every call)
def boxed(op: torch._ops.OpOverload) -> Callable[..., Any]:
    """``op`` (a ``torch.ops.fused_optim`` overload) with what the stable ABI leaves to Python."""
    written = _written(op)
    where = str(op._schema.name)

    if not written:
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return op(*args, **kwargs)
            except RuntimeError as e:
                raise translated(e) from None
        return call

    def lists(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[str, Any]]:
        scale = kwargs.get("grad_scale")
        return [(name, args[i] if i < len(args) else kwargs.get(name, ())) for i, name in written
                if _writes(name, scale)]

    def call_in_place(*args: Any, **kwargs: Any) -> Any:
        targets = lists(args, kwargs)
        check_in_place(where, targets)
        try:
            result = op(*args, **kwargs)
        except RuntimeError as e:
            raise translated(e) from None
        if _written_unless_skipped(kwargs.get("found_inf")):
            _bump_versions([tensors for _, tensors in targets])
        return result

    return call_in_place


class _Kept:
    """What both kinds of kept step share (:class:`KeptStep`, :class:`UnboxedKeptStep`)."""

    __slots__ = ("__weakref__", "id", "op")
    op: torch._ops.OpOverload

    def __deepcopy__(self, memo: dict[int, Any]) -> None:
        return None

    def _traced(self, lists: tuple[list[torch.Tensor], ...], lr: float, grad_scale: torch.Tensor | None,
                found_inf: torch.Tensor | None, kwargs: dict[str, Any]) -> bool:
        """Where Dynamo traces the step: calls the op itself with the kept keyword arguments, so that
        the graph holds the op (and no kept list is reached from a frame that sees fakes); says
        whether it did."""
        if not torch.compiler.is_compiling():
            return False
        self.op(*lists, lr=lr, grad_scale=grad_scale, found_inf=found_inf, **kwargs)
        return True


class KeptStep(_Kept):
    """One in-place ``<algo>_step_`` call whose lists the C++ side keeps between steps
    (csrc/kept_step.h; the stable build's ``<algo>_step_keep`` and ``kept_step_`` ops).

    Each call then hands ``torch.ops`` the step's gradients, ``lr`` and AMP arguments only, not
    every parameter and state list again (boxing them was most of a step's host time on many small
    tensors). The caller vouches that everything else is what it was when kept: the same lists of
    the same tensor objects and the same keyword arguments (fused_optim.optim's step reuse checks
    exactly that before each step). The op still runs all its checks on every step, and the
    in-place refusals and version bumps the stable ABI leaves to Python are made here as
    :func:`boxed` makes them. The lists are freed with this object; a deep copy keeps nothing
    (``None``: the copy's owner keeps its own lists afresh).
    """

    __slots__ = ("inference_mode", "targets", "where")

    @classmethod
    def make(cls, name: str, lists: list[list[torch.Tensor]], kwargs: dict[str, Any], *,
             unboxed: bool = False) -> KeptStep | UnboxedKeptStep | None:
        """A kept ``name`` call (``unboxed``: the fast path's, :class:`UnboxedKeptStep`), or None
        while Dynamo traces (a frame of a compiled step, which the op itself must reach, and which
        must not keep lists it would see as fakes)."""
        if torch.compiler.is_compiling():
            return None
        if unboxed:
            return UnboxedKeptStep.make(name, lists, kwargs)
        return cls(name, lists, kwargs)

    def __init__(self, name: str, lists: list[list[torch.Tensor]], kwargs: dict[str, Any]) -> None:
        ops = torch.ops.fused_optim
        op = self.op = getattr(ops, name).default
        self.where = str(op._schema.name)
        # (name, tensors) of each kept list the op writes: checked once (whether a tensor is an
        # inference tensor never changes), the gradients on every step that writes them
        self.targets = [(n, lists[i]) for i, n in _written(op) if i < len(lists) and n != "grads"]
        self.inference_mode = torch.is_inference_mode_enabled()
        check_in_place(self.where, self.targets)
        try:
            # (not the gradients, which each step passes: the kept call must not keep them alive)
            self.id = getattr(ops, name + "keep")(lists[0], [], *lists[2:], **kwargs)
        except RuntimeError as e:
            raise translated(e) from None
        weakref.finalize(self, ops.kept_free, self.id)

    def __call__(self, *lists: list[torch.Tensor], lr: float, grad_scale: torch.Tensor | None = None,
                 found_inf: torch.Tensor | None = None, **kwargs: Any) -> None:
        """One step with ``lists[1]`` as the gradients (``lists``: the op's lists as kept, the
        gradients replaced; the other keyword arguments are the kept ones, passed only to the op
        itself where Dynamo traces this call, so that the graph holds the op)."""
        if self._traced(lists, lr, grad_scale, found_inf, kwargs):
            return
        grads = lists[1]
        # The kept lists again only where a mode changed (grad mode is off in a drop-in step); the
        # gradients where this step writes them
        again = torch.is_grad_enabled() or torch.is_inference_mode_enabled() != self.inference_mode
        new = [("grads", grads)] if _writes("grads", grad_scale) else []
        check_in_place(self.where, [*new, *self.targets] if again else new)
        try:
            torch.ops.fused_optim.kept_step_(self.id, grads, lr=lr, grad_scale=grad_scale, found_inf=found_inf)
        except RuntimeError as e:
            raise translated(e) from None
        if _written_unless_skipped(found_inf):
            _bump_versions([*(tensors for _, tensors in new), *(tensors for _, tensors in self.targets)])


class UnboxedKeptStep(_Kept):
    """The fast path's kept step: :class:`KeptStep` through the ATen build's unboxed
    ``<algo>_step_keep`` and ``kept_step_`` (``EAGER``), whose C++ side makes the in-place refusals
    and version bumps itself. A call returns NotImplemented, having done nothing, where the unboxed
    call declines (as every unboxed call does: a None, sparse or subclass gradient, a mode or
    profiler that the dispatcher must see); the caller then takes its full path.
    """

    __slots__ = ()

    @classmethod
    def make(cls, name: str, lists: list[list[torch.Tensor]], kwargs: dict[str, Any]) -> UnboxedKeptStep | None:
        """A kept ``name`` call, or None where the unboxed keep declines."""
        # (not the gradients, which each step passes: the kept call must not keep them alive)
        kept = EAGER[name + "keep"](lists[0], [], *lists[2:], **kwargs)
        return None if kept is NotImplemented else cls(kept, getattr(torch.ops.fused_optim, name).default)

    def __init__(self, kept: int, op: torch._ops.OpOverload) -> None:
        self.id, self.op = kept, op
        weakref.finalize(self, EAGER["kept_free"], kept)

    def __call__(self, *lists: list[torch.Tensor], lr: float, grad_scale: torch.Tensor | None = None,
                 found_inf: torch.Tensor | None = None, **kwargs: Any) -> Any:
        """One step with ``lists[1]`` as the gradients, as :meth:`KeptStep.__call__`; None, or
        NotImplemented where the unboxed call declines."""
        if self._traced(lists, lr, grad_scale, found_inf, kwargs):
            return None
        return EAGER["kept_step_"](self.id, lists[1], lr=lr, grad_scale=grad_scale, found_inf=found_inf)
