"""What every drop-in optimizer shares: its step routine, the fallback test and dtype/device buckets."""

from __future__ import annotations

import functools
from collections.abc import Callable
from itertools import chain, repeat
from operator import attrgetter, is_
from typing import Any, NamedTuple

import torch
from torch import Tensor
from torch.optim.optimizer import (
    _get_scalar_dtype,
    _global_optimizer_post_hooks,
    _global_optimizer_pre_hooks,
)

from fused_optim import _C, _native, ops

__all__ = ["STEP", "FusedStep", "Slot", "StepPlan", "bucket_lists", "check_capture", "option", "run_closure", "scalar",
           "scalar_state", "torch_path_needed", "zeros"]


def run_closure(closure: Callable[[], Any] | None) -> Any:
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


def torch_path_needed(optimizer: torch.optim.Optimizer) -> bool:
    """``differentiable=True`` (autograd through in-place updates) is a torch.optim feature outside
    a fused kernel's reach, and so is a ``capturable`` group whose hyper-parameters are tensors on
    a device (the kernels take them as numbers, which would be read on the host): such groups run
    torch.optim's own implementation, so the class still accepts every torch argument.
    ``capturable=True`` with numeric hyper-parameters runs the fused kernels, which then read and
    advance the step counters on the parameters' device (see :mod:`fused_optim.optim`)."""
    for group in optimizer.param_groups:
        if group.get("differentiable"):
            return True
        lr = group.get("lr")
        if isinstance(lr, Tensor) and lr.requires_grad:
            return True
        if group.get("capturable") and any(_on_a_device(v) for k, v in group.items() if k != "params"):
            return True
    return False


def _on_a_device(value: Any) -> bool:
    """Whether a group setting is (or holds, as ``betas`` may) a tensor off the CPU."""
    if type(value) in (tuple, list):
        return any(map(_on_a_device, value))
    return isinstance(value, Tensor) and value.device.type != "cpu"


def check_capture(optimizer: torch.optim.Optimizer) -> None:
    """Refuses a step inside CUDA-graph capture unless every group is ``capturable``, as
    torch.optim does.

    Without ``capturable`` a fused step reads its step counts on the host when it is launched, so
    a captured step would replay the capture's bias corrections and never advance
    ``state["step"]``: silently wrong. With it the kernels read and advance the counters on the
    device, and every replay is a step. Costs one function call in a process that never
    initialized CUDA. Callers skip it under ``torch.compile``, which decides on CUDA graphs itself
    (as torch.optim does).
    """
    if not (torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()):
        return
    for i, group in enumerate(optimizer.param_groups):
        if not group.get("capturable"):
            raise RuntimeError(
                f"{type(optimizer).__name__}.step() was called while the current CUDA stream is capturing a "
                f"graph, but param_groups[{i}] has capturable=False: a replay of such a step would reuse the "
                "step counts it was captured with. Construct the optimizer with capturable=True to capture its "
                "step.")


def scalar(value: Any) -> float:
    """A hyper-parameter as a Python float (torch.optim allows tensors for lr and betas)."""
    return float(value.item()) if isinstance(value, Tensor) else float(value)


def bucket_lists(lists: list[list[Tensor]], real_lists: int) -> list[list[list[Tensor]]]:
    """Splits one group's op arguments by (device, dtype, device mesh) of ``lists[0]`` (the params).

    torch.optim's foreach path groups the same way, so a parameter group may mix devices and
    dtypes, while one op call requires a single device and dtype. Likewise an op call takes
    DTensors of one mesh or plain tensors, while tensor parallelism leaves some parameters plain
    (norms) beside the DTensors of the sharded layers. Complex tensors are updated as
    their real views, exactly as torch.optim does; the first ``real_lists`` lists are viewed so
    (the rest, e.g. step counters, are passed through). Empty lists (absent optional state) stay
    empty, and a group without params gives no call.
    """
    params = lists[0]
    if not params:
        return []
    # A DTensor's mesh (plain tensors: None); DeviceMesh hashes by its ranks and shape.
    kinds = {(p.device, p.dtype, getattr(p, "device_mesh", None)) for p in params}
    if len(kinds) == 1 and not next(iter(kinds))[1].is_complex:
        return [lists]  # the common case: one call for the whole group
    buckets: dict[tuple[Any, ...], list[list[Tensor]]] = {}
    for i, p in enumerate(params):
        real_dtype = p.real.dtype if p.is_complex() else p.dtype
        bucket = buckets.setdefault((p.device, real_dtype, getattr(p, "device_mesh", None)), [[] for _ in lists])
        for k, lst in enumerate(lists):
            if lst:
                t = lst[i]
                bucket[k].append(torch.view_as_real(t) if k < real_lists and t.is_complex() else t)
    return list(buckets.values())


class Amp:
    """``torch.amp.GradScaler``'s ``grad_scale`` and ``found_inf`` for one step, as the op keyword
    arguments of each call: copied to a call's device once per device, as torch's fused optimizers
    copy them (asynchronously, except to the CPU, whose kernels read them at once)."""

    __slots__ = ("_by_device", "_given")

    def __init__(self, grad_scale: Tensor | None, found_inf: Tensor | None) -> None:
        self._given = {k: t for k, t in (("grad_scale", grad_scale), ("found_inf", found_inf)) if t is not None}
        self._by_device: dict[torch.device, dict[str, Tensor]] = {}

    def kwargs(self, device: torch.device) -> dict[str, Tensor]:
        """The arguments on ``device``."""
        kwargs = self._by_device.get(device)
        if kwargs is None:
            kwargs = self._by_device[device] = {
                k: t.to(device, non_blocking=device.type != "cpu") for k, t in self._given.items()}
        return kwargs


class StepPlan:
    """The op calls of one optimizer step, checked together before the first one runs.

    Each op call checks all its arguments before it modifies anything, but a step makes one call
    per parameter group (and per device and dtype), so a bad second group (a learning rate set to
    -1, a state tensor of the wrong shape from ``load_state_dict``, a parameter listed twice)
    would otherwise be found after the first group was updated. When there is more than one call,
    the ops first check every call (:func:`fused_optim.ops.validate_only`: the checks are the
    op's own, written once in C++), and a parameter listed in two calls, which no single call can
    see, is rejected here. State created lazily for this step is forgotten again if the step fails
    (SGD's fresh momentum buffers are uninitialized until their call runs): use it as a context
    manager around gathering the state and :meth:`run`.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, name: str,
                 calls: list[tuple[Callable[..., Any], list[list[Tensor]], dict[str, Any]]] | None = None,
                 amp: Amp | None = None) -> None:
        self._optimizer = optimizer
        self._name = name
        self._calls = [] if calls is None else calls  # (op, its lists, its keyword arguments)
        self._amp = amp  # added to every call's keyword arguments
        self._new_state: dict[int, tuple[Tensor, tuple[str, ...]]] = {}
        # per (group, kind): which state entries a parameter has this step (FusedStep._layout)
        self.layouts: dict[tuple[int, Any], tuple[Any, ...]] = {}

    def note_new_state(self, param: Tensor, *keys: str) -> None:
        """Records that this step created ``param``'s state (only ``keys`` of it, when given)."""
        self._new_state[id(param)] = (param, keys)

    def add(self, op: Callable[..., Any], lists: list[list[Tensor]], real_lists: int, kwargs: dict[str, Any]
            ) -> list[list[list[Tensor]]]:
        """Adds the calls of one group; returns their lists (``[lists]`` itself when one call takes them as
        they are)."""
        buckets = bucket_lists(lists, real_lists)
        for bucket in buckets:
            self._calls.append((op, bucket, kwargs))
        return buckets

    def creates_state(self) -> bool:
        """Whether this step created state (before :meth:`run`)."""
        return bool(self._new_state)

    def __enter__(self) -> StepPlan:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: Any) -> None:
        if kind is not None:  # forget the state created for calls that did not run
            self.forget(self._new_state)
        self._new_state.clear()

    def new_state(self) -> dict[int, tuple[Tensor, tuple[str, ...]]]:
        """The state this step created so far (see :meth:`note_new_state`), for :meth:`forget`."""
        return dict(self._new_state)

    def forget(self, new_state: dict[int, tuple[Tensor, tuple[str, ...]]]) -> None:
        """Removes the state entries ``new_state`` lists from the optimizer's state."""
        state = self._optimizer.state
        for param, keys in new_state.values():
            if not keys:
                state.pop(param, None)
            elif param in state:
                for key in keys:
                    state[param].pop(key, None)
                if not state[param]:
                    del state[param]

    def run(self) -> bool:
        """Runs the calls, every one checked first where there are several; returns False, having
        written nothing, where an unboxed call (``_native.EAGER``, see :class:`_Gathered`) declined.

        A later call cannot decline what the check pass accepted (the same arguments); if one did,
        the calls before it have written, so this raises instead of letting the step run twice.
        """
        calls = self._calls
        if self._amp is not None:  # the same lists (objects) with the AMP arguments on their device
            amp = self._amp
            calls = [(op, lists, {**kwargs, **amp.kwargs(lists[0][0].device)}) for op, lists, kwargs in calls]
        if len(calls) > 1:
            _check_duplicates(self._name, [lists for _, lists, _ in calls])
            declined = False
            with ops.validate_only():  # no return inside: torch.compile traces the block whole
                for op, lists, kwargs in calls:
                    declined = op(*lists, **kwargs) is NotImplemented or declined
            if declined:
                return False
        for op, lists, kwargs in calls:
            if op(*lists, **kwargs) is NotImplemented:
                if lists is calls[0][1]:
                    return False
                raise RuntimeError(f"{self._name}: an op call declined arguments the step had already "
                                   "checked (a fused-optim bug; the calls before it have written)")
            if self._new_state:  # only on a step that created state: keep the common step lean
                for p in lists[0]:  # this state is now in use
                    self._new_state.pop(id(_original(p)), None)
        return True


def _unscale_for_torch(optimizer: torch.optim.Optimizer, grad_scale: Tensor | None) -> None:
    """Multiplies every gradient (the values of a sparse one) by ``1 / grad_scale`` in place, as
    GradScaler's own unscale does."""
    if grad_scale is None:
        return
    inv_scale = grad_scale.double().reciprocal().float()
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.grad is not None:
                values = p.grad._values() if p.grad.is_sparse else p.grad
                values.mul_(inv_scale.to(values.device))


def _check_duplicates(name: str, calls: list[list[list[Tensor]]]) -> None:
    """Rejects a parameter listed in two of a step's calls (the op lists of each), which no single
    call can see."""
    seen: set[tuple[Any, ...]] = set()  # (storage, offset, shape, stride)
    for lists in calls:
        for p in lists[0]:
            if p.numel() == 0:
                continue
            p = getattr(p, "_local_tensor", p)  # a DTensor's own shard: it has no storage itself
            where = (p.untyped_storage().data_ptr(), p.storage_offset(), tuple(p.shape), tuple(p.stride()))
            if where in seen:
                raise ValueError(f"{name}: the same parameter appears twice in the parameter groups "
                                 "(each parameter must be listed once)")
            seen.add(where)


def _original(t: Tensor) -> Tensor:
    """The complex parameter behind a real view made by :func:`bucket_lists` (else ``t``)."""
    base = t._base
    return base if base is not None and base.is_complex() else t

_is_sparse = attrgetter("is_sparse")
_UNCACHED_OPTIONS = ("params", "lr")  # lr changes every scheduled step and never shapes a row


def _same(objects: list[Any], kept: list[Any]) -> bool:
    """Whether ``objects`` are the ``kept`` objects themselves, in order (identity, never ``==``)."""
    return len(objects) == len(kept) and all(map(is_, objects, kept))


def _state_values(state: dict[Any, Any]) -> list[Any] | None:
    """Every value of every parameter's state, in order (None if the state or an entry of it is not
    a dict)."""
    if not isinstance(state, dict):
        return None
    try:
        return [*chain.from_iterable(map(dict.values, state.values()))]
    except TypeError:
        return None


def _same_state(state: dict[Any, Any], kept: list[Any]) -> bool:
    """Whether every parameter's state holds the ``kept`` values themselves, in order (one C pass:
    this runs on every step, over every state value)."""
    return _C._same_state(state, kept)


def _options(group: dict[str, Any]) -> dict[str, Any]:
    """The group's settings that may decide its rows (which state, which variant)."""
    return {k: v for k, v in group.items() if k not in _UNCACHED_OPTIONS}


def _same_options(group: dict[str, Any], options: dict[str, Any]) -> bool:
    try:
        return bool(_options(group) == options)
    except (RuntimeError, TypeError):  # e.g. a multi-element tensor: treat as changed
        return False


def _plain(value: Any) -> bool:
    """Whether a setting is plain data (a number, flag, string or None, or a tuple or list of them),
    which a group changes only by replacing it, never in place as a tensor can be."""
    if type(value) in (tuple, list):
        return all(map(_plain, value))
    return value is None or type(value) in (bool, int, float, str)


class _Gathered:
    """One step's gathered op lists, less the gradients, reused by the next steps while everything
    they came from is unchanged.

    Gathering the rows (a state lookup and a Python row per parameter) costs more host time than
    the op call itself for many small tensors, and from one step to the next it gives the same
    tensors: only the gradients are new objects after ``zero_grad()``. The key is checked on every
    step by identity (C-level ``map(operator.is_, ...)`` passes, no per-parameter Python code):
    ``optimizer.state`` the same dict, holding the same values of every parameter's state in the
    same order (``load_state_dict``, a state entry set, deleted or replaced); the same group dicts
    (``add_param_group``), in each the same parameters and the same settings but ``lr``; and
    gradients on exactly the same parameters, none sparse (see :meth:`step`). The op's keyword
    arguments are kept as well where the group's settings are plain data (:func:`_plain`: a tensor
    setting may change in place, unseen by the key), with ``lr`` read afresh on every step.
    Gradients are read afresh and never kept, so the cache holds no memory that
    ``zero_grad(set_to_none=True)`` frees. Only a step that created no state and made one call per
    group on its lists as gathered (one device, one real dtype, one row variant) is kept; anything
    else takes the full path.
    """

    __slots__ = ("call", "entries", "groups", "kept", "name", "op", "state", "state_values")

    def __init__(self, optimizer: FusedStep, entries: list[tuple[Any, ...]]) -> None:
        self.state = optimizer.state
        self.groups = list(optimizer.param_groups)
        self.state_values = _state_values(self.state)
        self.name, self.op = optimizer._name, optimizer._op
        # per group: params, options, the grad-is-None mask (None: every parameter had a gradient),
        # (variant, params with a gradient, columns) or None, and the keyword arguments or None
        self.entries = entries
        # The op's unboxed call, which declines DTensors (as every tensor subclass): for DTensor
        # parameters the call through the dispatcher instead (fused_optim._dtensor's handler, which
        # checks each step's gradients' placements and runs the kernel once on the local shards).
        dtensor = any(call is not None and hasattr(call[1][0], "_local_tensor") for *_, call, _ in entries)
        # Each group's call with plain settings is kept on the C++ side from the first reuse on
        # (_native.KeptStep, or UnboxedKeptStep on the fast path: one entry per group, made when
        # first used).
        self.kept: list[_native.KeptStep | _native.UnboxedKeptStep | None] | None = None
        if self.op not in _native.EAGER:  # a step that is a Python sequence of ops (Muon's): its own call
            self.call = getattr(ops, self.op)
        else:
            # (Without the fast path, fused_optim._native's stand-in would decline every step.)
            direct = not dtensor and _native.BUILD_INFO["eager"]
            self.call = _native.EAGER[self.op] if direct else getattr(ops._eager, self.op)
            if not dtensor:
                self.kept = [None] * len(entries)

    def step(self, optimizer: FusedStep, amp: Amp | None) -> bool:
        """Runs the step's op calls on the kept lists with this step's gradients; returns False,
        having modified nothing, where anything the lists came from changed (the caller then
        gathers afresh).

        Where every parameter of a group had a gradient, its gradients go to the op as they are
        read: the op's unboxed call declines (NotImplemented, before any check or write) a None
        or sparse gradient, as it declines anything it would leave to the dispatcher, and this
        step then defers to the full path, which skips or names them. The call through the
        dispatcher (a kept step's, or the op's) refuses them instead (an exception, raised before
        anything is written, as for any bad argument): that too defers to the full path, so that
        no such step pays a Python pass over its gradients to find them first.
        """
        if (optimizer.state is not self.state or self.state_values is None
                or not _same(optimizer.param_groups, self.groups) or not _same_state(self.state, self.state_values)):
            return False
        unboxed = self.call
        declines = self.op in _native.EAGER and unboxed is _native.EAGER[self.op]
        calls = []
        kept = self.kept
        # Without kept steps (a Python sequence of ops, Muon's; DTensors) the gradients are screened
        # here first: such a call is not known to refuse them before it writes.
        screen = not declines and kept is None
        for i, (group, (params, options, no_grad, call, kwargs)) in enumerate(zip(self.groups, self.entries)):
            grads = _native.grads_if_same(group["params"], params)  # (one C pass: identity, then .grad)
            if grads is None or not _same_options(group, options):
                return False
            if no_grad is not None and [*map(is_, grads, repeat(None))] != no_grad:
                return False
            if call is None:  # no parameter of this group has a gradient
                continue
            variant, with_grad, columns = call
            if no_grad is not None:
                grads = [g for g in grads if g is not None]
            elif screen and any(map(is_, grads, repeat(None))):
                return False  # (a Python step, Muon's, or a DTensor's handler: see above)
            if screen and any(map(_is_sparse, grads)):
                return False
            lists = [with_grad, grads, *columns]
            if kwargs is None:
                calls.append((unboxed, lists, optimizer._kwargs(group, variant)))
                continue
            kwargs["lr"] = scalar(group["lr"])
            if kept is None:
                calls.append((unboxed, lists, kwargs))
                continue
            step = kept[i]
            if step is None:
                step = kept[i] = _native.KeptStep.make(self.op, lists, kwargs, unboxed=declines)
            calls.append((unboxed if step is None else step, lists, kwargs))
        try:
            return StepPlan(optimizer, self.name, calls, amp).run()  # type: ignore[arg-type]
        except (TypeError, ValueError, RuntimeError):
            if not declines and not screen and any(g is None or g.is_sparse for _, lists, _ in calls for g in lists[1]):
                return False  # a gradient gone None or sparse, refused before any write: see above
            raise


Init = Callable[[Tensor, Tensor, dict[str, Any]], Tensor]  # (param, grad, group) -> a fresh state value


def zeros(p: Tensor, grad: Tensor, group: dict[str, Any]) -> Tensor:
    """The default :class:`Slot` init: zeros like the parameter, as torch.optim's buffers start."""
    return torch.zeros_like(p, memory_format=torch.preserve_format)


class Slot(NamedTuple):
    """One entry of a parameter's state, as a drop-in class declares it in ``_state``.

    ``init(param, grad, group)`` makes its first value; ``when(group, kind)``, if given, says
    whether the parameter has this entry: an option such as ``amsgrad`` (:func:`option`), or the
    parameter's kind (:meth:`FusedStep._kind`, e.g. Adafactor's factored matrices). Without it,
    the entry is not created and its column of the op call is left empty. ``scalar`` marks a 0-d
    tensor (a counter, a schedule's running value), which complex parameters do not view as real.
    """

    key: str
    init: Init = zeros
    when: Callable[[dict[str, Any], Any], bool] | None = None
    scalar: bool = False


def scalar_state(key: str, value: float | Callable[[dict[str, Any]], float] = 0.0, *, on_param_device: bool = False
                 ) -> Slot:
    """A 0-d state entry of torch's scalar dtype holding ``value`` (or ``value(group)``) at first: on
    the CPU, as torch.optim keeps its step counters, or on the parameter's device (ASGD's, and
    every one of a ``capturable`` group, where torch.optim keeps them too)."""
    def init(p: Tensor, grad: Tensor, group: dict[str, Any]) -> Tensor:
        first = value(group) if callable(value) else value
        on_device = on_param_device or group.get("capturable")
        return torch.tensor(first, dtype=_get_scalar_dtype(), device=p.device if on_device else None)
    return Slot(key, init, scalar=True)


def option(name: str) -> Callable[[dict[str, Any], Any], bool]:
    """A :class:`Slot` ``when``: the group's option ``name`` is set (true, or a non-zero factor)."""
    return lambda group, kind: bool(group[name])


STEP = scalar_state("step")  # the plain string "step" in a ``_state`` stands for this slot


def _profiling() -> bool:
    """Whether a torch profiler runs (torch's own cheap check, as its compiled code makes it, then
    the profiler's state itself): torch.optim's step and zero_grad are its ranges then."""
    return getattr(torch.autograd.profiler, "_is_profiler_enabled", True) or torch._C._autograd._profiler_enabled()


class FusedStep:
    """The one ``step()`` of every drop-in class: a mixin listed before the torch.optim class.

    A drop-in class declares only what is its own, as data this class interprets:

    * ``_state``: the entries of a parameter's state in torch's key order, each a :class:`Slot`
      or a key string (``"step"``, the step counter; any other, a buffer of zeros like the
      parameter). A parameter's missing entries are created on its first step, as torch.optim
      creates them (and forgotten again if that step fails, see :class:`StepPlan`);
    * ``_columns``: the op's state lists, in its argument order after the params and grads; by
      default the entries in ``_state`` order with ``step`` last. A column whose slot does not
      apply (``Slot.when``) is passed as an empty list. The leading per-element columns, not the
      ``scalar`` ones, are viewed as real for complex parameters;
    * ``_floats``: the group's hyper-parameters the op takes as floats: a key, or a tuple
      ``(key, *names)`` for a tuple-valued option (``betas`` is always ``beta1``, ``beta2``...);
      ``_flags``, its booleans; ``_variant_flag``, a keyword argument set per row by
      :meth:`_variant`, whose rows then make separate calls (SGD's ``first_step``, Adafactor's
      ``factored``).

    The op is ``fused_optim.ops.<name>_step_`` and messages name the optimizer by its torch.optim
    class (``_name``, both derived once per class). For the optimizers torch.optim lacks, the pure-PyTorch class
    in :mod:`fused_optim._reference` takes the torch.optim class's place (its ``_state`` and its
    step serve the groups torch.optim would have run).

    The routine runs the closure, gathers every group first, then makes one op call per group
    (per device and dtype, and per variant), all checked before the first one writes
    (:class:`StepPlan`). Groups torch.optim must run (:func:`torch_path_needed`) go to its own
    ``step``, as do sparse gradients where the torch optimizer supports them
    (``_sparse_to_torch``); otherwise a sparse gradient is rejected before any state of that
    parameter is touched.
    """

    _name: str  # the torch.optim class's name, for messages
    _op: str
    _state: tuple[Any, ...]  # of str | Slot; Any, as Lion and Adan inherit their reference's tuple[str, ...]
    _columns: tuple[str, ...] = ()
    _floats: tuple[str | tuple[str, ...], ...] = ()
    _flags: tuple[str, ...] = ()  # a flag absent from a group (older checkpoints) is False
    _variant_flag: str | None = None
    _sparse_to_torch = False
    _sparse_hint = ""
    # torch.amp.GradScaler hands this optimizer its scale and inf flag (as the attributes
    # ``grad_scale`` and ``found_inf``) instead of unscaling the gradients and reading the flag
    # itself: the kernels unscale as they read and skip the step by themselves.
    _step_supports_amp_scaling = True
    # Whether a parameter's fresh state holds no value until its first step writes it (SGD's
    # momentum buffers): a step that found_inf skips then forgets the state it created.
    _fresh_state_written_by_step = False
    _slots: tuple[Slot, ...]  # derived from the declarations above, once per class
    _column_keys: tuple[str, ...]
    _conditional: bool  # whether some entry depends on the options or the kind (Slot.when)
    _kinds: bool  # whether the class tells parameters apart (_kind)
    _real_lists: int  # how many leading op lists are viewed as real for complex parameters
    state: Any
    param_groups: list[dict[str, Any]]
    _gathered: _Gathered  # set by a step whose gathering the next one may reuse

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._name = next(c.__name__ for c in cls.__mro__
                         if issubclass(c, torch.optim.Optimizer) and not issubclass(c, FusedStep))
        if not hasattr(cls, "_op"):
            cls._op = f"{cls._name.lower()}_step_"
        cls._slots = tuple(STEP if s == "step" else Slot(s) if isinstance(s, str) else s for s in cls._state)
        slots = {s.key: s for s in cls._slots}
        keys = cls._columns or (*(k for k in slots if k != "step"), *(["step"] if "step" in slots else []))
        cls._column_keys = tuple(keys)
        cls._conditional = any(s.when is not None for s in cls._slots)
        cls._kinds = cls._kind is not FusedStep._kind
        per_element = [not slots[k].scalar for k in keys]
        cls._real_lists = 2 + sum(per_element)
        if per_element != sorted(per_element, reverse=True):
            raise TypeError(f"{cls.__name__}: the per-element columns must come before the scalar ones")

    @staticmethod
    def profile_hook_step(func: Callable[..., Any]) -> Callable[..., Any]:
        """torch.optim's wrapper of ``step()`` (the step hooks and the profiler's
        ``Optimizer.step#<class>.step`` range), entered only where something observes the step.

        torch.optim enters its ``record_function`` on every step, profiler or not: ~12 us of
        host time, a tenth of a reused step on 200 small tensors. Where no profiler runs and no
        step hook is registered (global or this optimizer's), the step runs without it, then
        ``_optimizer_step_code`` (the profiler's marker) as torch calls it; otherwise torch's own
        wrapper runs the step, so hooks and traces behave exactly as in torch.optim.
        """
        observed = torch.optim.Optimizer.profile_hook_step(func)

        @functools.wraps(func)
        def step(*args: Any, **kwargs: Any) -> Any:
            self = args[0]
            if (_profiling() or _global_optimizer_pre_hooks or _global_optimizer_post_hooks
                    or self._optimizer_step_pre_hooks or self._optimizer_step_post_hooks):
                return observed(*args, **kwargs)
            out = func(*args, **kwargs)
            self._optimizer_step_code()
            return out

        return step

    def zero_grad(self, set_to_none: bool = True) -> None:
        """``torch.optim.Optimizer.zero_grad``; the default (``set_to_none``) without its profiler
        range where no profiler runs (see :meth:`profile_hook_step`)."""
        if not set_to_none or _profiling():
            super().zero_grad(set_to_none)  # type: ignore[misc]
            return
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad = None

    def _kind(self, grad: Tensor) -> Any:
        """What besides the group decides which state entries a parameter has (``Slot.when``)."""
        return None

    def _variant(self, kind: Any, created: bool) -> bool:
        """The ``_variant_flag`` value of a row (``created``: this step created some of its state)."""
        return False

    def _layout(self, group: dict[str, Any], kind: Any) -> tuple[Any, ...]:
        """``(slots, columns)``: the entries a parameter of this group and kind has, and each column's
        key (None where its entry does not apply; ``columns`` None when all apply)."""
        if not self._conditional:
            return self._slots, None
        has = {s.key for s in self._slots if s.when is None or s.when(group, kind)}
        slots = tuple(s for s in self._slots if s.key in has)
        columns = None if len(has) == len(self._slots) else tuple(k if k in has else None for k in self._column_keys)
        return slots, columns

    def _row(self, group: dict[str, Any], p: Tensor, grad: Tensor, plan: StepPlan
             ) -> tuple[bool, list[Tensor | None]]:
        """``(variant, row)``: the op arguments for ``p`` (None for a column that does not apply),
        its missing state created first."""
        # Runs per parameter on every step that cannot reuse the last one's lists: kept lean, the
        # option-dependent layout decided once per group (and kind) and step.
        kind = self._kind(grad) if self._kinds else None
        layout = plan.layouts.get((id(group), kind))
        if layout is None:
            layout = plan.layouts[(id(group), kind)] = self._layout(group, kind)
        slots, columns = layout
        state = self.state[p] if slots else {}  # no entry at all (SGD without momentum), as torch makes none
        created = False
        if len(state) < len(slots):
            new = [s for s in slots if s.key not in state]
            plan.note_new_state(p, *([s.key for s in new] if state else []))  # no keys: all of it is new
            for s in new:
                state[s.key] = s.init(p, grad, group)
            created = bool(new)
        if columns is None:
            row = [p, grad, *map(state.__getitem__, self._column_keys)]
        else:  # (a None key is never in the state)
            row = [p, grad, *map(state.get, columns)]
        return (self._variant_flag is not None and self._variant(kind, created)), row

    def _kwargs(self, group: dict[str, Any], variant: bool) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        for key in self._floats:
            if key == "betas":  # beta1, beta2 (and beta3 for Adan)
                kwargs.update((f"beta{i}", scalar(b)) for i, b in enumerate(group["betas"], 1))
            elif isinstance(key, tuple):  # a tuple-valued option: one keyword argument per item
                kwargs.update(zip(key[1:], map(scalar, group[key[0]])))
            else:
                kwargs[key] = scalar(group[key])
        for key in self._flags:
            kwargs[key] = bool(group.get(key, False))
        if self._variant_flag is not None:
            kwargs[self._variant_flag] = variant
        return kwargs

    def _torch_step_amp(self, super_step: Callable[..., Any], closure: Callable[[], Any] | None,
                        grad_scale: Tensor | None, found_inf: Tensor | None) -> Any:
        """torch.optim's own step (:func:`torch_path_needed`, sparse gradients) under GradScaler:
        its paths other than the fused ones take no AMP arguments, so the gradients are unscaled
        here and the flag is read on the host, as GradScaler does for an optimizer without them."""
        _unscale_for_torch(self, grad_scale)  # type: ignore[arg-type]
        if found_inf is not None and bool(found_inf):
            return None
        hidden: dict[str, Any] = {k: self.__dict__.pop(k) for k in ("grad_scale", "found_inf") if k in self.__dict__}
        try:
            return super_step(closure)
        finally:
            self.__dict__.update(hidden)

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None, *, grad_scale: Tensor | None = None,
             found_inf: Tensor | None = None) -> Any:
        """Performs one optimization step (``closure`` re-evaluates the model and returns the loss).

        ``grad_scale`` and ``found_inf`` (one-element float32 tensors) are ``torch.amp.GradScaler``'s,
        which it sets as this optimizer's attributes of the same names before it calls ``step()``:
        the gradients are multiplied by ``1 / grad_scale`` as the kernel reads them (and left so, as
        torch's fused optimizers leave them), and where ``found_inf`` is non-zero the step changes
        nothing, step counters included.
        """
        attributes = self.__dict__
        if grad_scale is None:
            grad_scale = attributes.get("grad_scale")
        if found_inf is None:
            found_inf = attributes.get("found_inf")
        amp = None if grad_scale is None and found_inf is None else Amp(grad_scale, found_inf)
        super_step = super().step  # type: ignore[misc]
        compiling = torch.compiler.is_compiling()
        if not compiling:
            check_capture(self)  # type: ignore[arg-type]
        if torch_path_needed(self):  # type: ignore[arg-type]
            return super_step(closure) if amp is None else self._torch_step_amp(super_step, closure, grad_scale,
                                                                                found_inf)
        loss = run_closure(closure)
        op = getattr(ops, self._op)
        cacheable = not compiling
        gathered = self.__dict__.get("_gathered") if cacheable else None
        if gathered is not None and gathered.step(self, amp):
            return loss  # (a reused step takes no sparse gradient: see _Gathered.step)
        # torch.optim's sparse update, where this class has one, on the gradients the closure left
        # (checked only here, off the reused step: a per-parameter Python pass on every step of SGD
        # and Adagrad once cost more host time than the whole kept step)
        if self._sparse_to_torch and any(
                p.grad is not None and p.grad.is_sparse for g in self.param_groups for p in g["params"]):
            if amp is None:
                super_step()
            else:
                self._torch_step_amp(super_step, None, grad_scale, found_inf)
            return loss
        with StepPlan(self, self._name, amp=amp) as plan:  # type: ignore[arg-type]
            if gathered is not None:
                del self._gathered  # out of date: don't keep its tensors alive
            work = []
            entries: list[Any] = []
            for group in self.param_groups:
                variants: dict[bool, list[list[Tensor | None]]] = {}  # the rows of each variant
                no_grad = []
                for p in group["params"]:
                    grad = p.grad
                    no_grad.append(grad is None)
                    if grad is None:
                        continue
                    if grad.is_sparse:
                        raise RuntimeError(f"{self._name} does not support sparse gradients{self._sparse_hint}")
                    variant, row = self._row(group, p, grad, plan)
                    rows = variants.get(variant)
                    if rows is None:
                        rows = variants[variant] = []
                    rows.append(row)
                work.append((group, variants))
                entries.append((list(group["params"]), _options(group), no_grad if any(no_grad) else None, None, None))
            cacheable = cacheable and not plan.creates_state()
            forget_if_skipped = (plan.new_state() if found_inf is not None and self._fresh_state_written_by_step
                                 and plan.creates_state() else None)
            for i, (group, variants) in enumerate(work):
                cacheable = cacheable and len(variants) <= 1
                for variant in sorted(variants):
                    # The op's lists are the rows' columns, an absent optional state (None) left out.
                    lists = [[t for t in column if t is not None] for column in zip(*variants[variant])]
                    kwargs = self._kwargs(group, variant)
                    buckets = plan.add(op, lists, self._real_lists, kwargs)
                    if cacheable and len(buckets) == 1 and buckets[0] is lists:
                        params, options, no_grad = entries[i][:3]
                        entries[i] = (params, options, no_grad, (variant, lists[0], lists[2:]),  # no grads kept
                                      dict(kwargs) if _plain(list(options.values())) else None)
                    else:
                        cacheable = False
            plan.run()
            if forget_if_skipped and bool(found_inf):  # on CUDA, one wait, on a step that created such state
                plan.forget(forget_if_skipped)
        if cacheable:
            self._gathered = _Gathered(self, entries)
        return loss
