"""What every drop-in optimizer shares: its step routine, the fallback test and dtype/device buckets."""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain, repeat
from operator import attrgetter, is_
from typing import Any

import torch
from torch import Tensor
from torch.optim.optimizer import _get_scalar_dtype

from fused_optim import ops

__all__ = ["FusedStep", "StepPlan", "bucket_lists", "new_step", "run_closure", "scalar", "torch_path_needed"]


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
    the ops first check every call (:func:`fused_optim.ops.validate_only`: the checks are the
    op's own, written once in C++), and a parameter listed in two calls, which no single call can
    see, is rejected here. State created lazily for this step is forgotten again if the step fails
    (SGD's fresh momentum buffers are uninitialized until their call runs): use it as a context
    manager around gathering the state and :meth:`run`.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, name: str) -> None:
        self._optimizer = optimizer
        self._name = name
        self._calls: list[tuple[Callable[..., Any], list[list[Tensor]], dict[str, Any]]] = []
        self._new_state: dict[int, tuple[Tensor, tuple[str, ...]]] = {}

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

    def add_call(self, op: Callable[..., Any], lists: list[list[Tensor]], kwargs: dict[str, Any]) -> None:
        """Adds one call whose lists already share a device and a real dtype."""
        self._calls.append((op, lists, kwargs))

    def creates_state(self) -> bool:
        """Whether this step created state (before :meth:`run`)."""
        return bool(self._new_state)

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
            with ops.validate_only():
                for op, lists, kwargs in self._calls:
                    op(*lists, **kwargs)
        for op, lists, kwargs in self._calls:
            op(*lists, **kwargs)
            if self._new_state:  # only on a step that created state: keep the common step lean
                for p in lists[0]:  # this state is now in use
                    self._new_state.pop(id(_original(p)), None)

    def _check_duplicates(self) -> None:
        seen: set[tuple[Any, ...]] = set()  # (storage, offset, shape, stride)
        for _, lists, _ in self._calls:
            for p in lists[0]:
                if p.numel() == 0:
                    continue
                where = (p.untyped_storage().data_ptr(), p.storage_offset(), tuple(p.shape), tuple(p.stride()))
                if where in seen:
                    raise ValueError(f"{self._name}: the same parameter appears twice in the parameter groups "
                                     "(each parameter must be listed once)")
                seen.add(where)


def _original(t: Tensor) -> Tensor:
    """The complex parameter behind a real view made by :func:`bucket_lists` (else ``t``)."""
    base = t._base
    return base if base is not None and base.is_complex() else t

_grad = attrgetter("grad")
_is_sparse = attrgetter("is_sparse")
_UNCACHED_OPTIONS = ("params", "lr")  # lr changes every scheduled step and never shapes a row


def _same(objects: list[Any], kept: list[Any]) -> bool:
    """Whether ``objects`` are the ``kept`` objects themselves, in order (identity, never ``==``)."""
    return len(objects) == len(kept) and all(map(is_, objects, kept))


def _state_values(state: dict[Any, Any]) -> list[Any] | None:
    """Every value of every parameter's state, in order (None if some state is not a dict)."""
    try:
        return [*chain.from_iterable(map(dict.values, state.values()))]
    except TypeError:
        return None


def _same_state(state: dict[Any, Any], kept: list[Any]) -> bool:
    """Whether every parameter's state holds the ``kept`` values themselves, in order."""
    states = state.values()
    try:
        return (sum(map(len, states)) == len(kept)
                and all(map(is_, chain.from_iterable(map(dict.values, states)), kept)))
    except TypeError:  # a state that is not a dict
        return False


def _options(group: dict[str, Any]) -> dict[str, Any]:
    """The group's settings that may decide its rows (which state, which variant)."""
    return {k: v for k, v in group.items() if k not in _UNCACHED_OPTIONS}


def _same_options(group: dict[str, Any], options: dict[str, Any]) -> bool:
    try:
        return bool(_options(group) == options)
    except (RuntimeError, TypeError):  # e.g. a multi-element tensor: treat as changed
        return False


class _Gathered:
    """One step's gathered op lists, less the gradients, reused by the next steps while everything
    they came from is unchanged.

    Gathering the rows (a state lookup and a Python row per parameter) costs more host time than
    the op call itself for many small tensors, and from one step to the next it gives the same
    tensors: only the gradients are new objects after ``zero_grad()``. The key is checked on every
    step by identity (C-level ``map(operator.is_, ...)`` passes, no per-parameter Python code):
    ``optimizer.state`` the same dict, holding the same values of every parameter's state in the
    same order (``load_state_dict``, a state entry set, deleted or replaced); the same group dicts
    (``add_param_group``), in each the same parameters and the same settings but ``lr`` (the op's
    keyword arguments are made afresh on every step, lr included); and gradients on exactly the
    same parameters, none sparse. Gradients are read afresh and never kept, so the cache holds no
    memory that ``zero_grad(set_to_none=True)`` frees. Only a step that created no state and made
    one call per group on its lists as gathered (one device, one real dtype, one row variant) is
    kept; anything else takes the full path.
    """

    __slots__ = ("entries", "groups", "state", "state_values")

    def __init__(self, optimizer: FusedStep,
                 entries: list[tuple[list[Tensor], dict[str, Any], list[bool], Any]]) -> None:
        self.state = optimizer.state
        self.groups = list(optimizer.param_groups)
        self.state_values = _state_values(self.state)
        self.entries = entries  # per group: params, options, grad-is-None mask, (variant, params, columns)

    def calls(self, optimizer: FusedStep) -> list[tuple[dict[str, Any], bool, list[list[Tensor]]]] | None:
        """Per group with gradients, ``(group, variant, lists)`` with this step's gradients; None
        when anything the lists came from changed."""
        if (optimizer.state is not self.state or self.state_values is None
                or not _same(optimizer.param_groups, self.groups) or not _same_state(self.state, self.state_values)):
            return None
        calls = []
        for group, (params, options, no_grad, call) in zip(self.groups, self.entries):
            group_params = group["params"]
            if not _same(group_params, params) or not _same_options(group, options):
                return None
            grads = [*map(_grad, group_params)]
            if [*map(is_, grads, repeat(None))] != no_grad:
                return None
            if call is None:  # no parameter of this group has a gradient
                continue
            variant, with_grad, columns = call
            if len(with_grad) != len(grads):
                grads = [g for g in grads if g is not None]
            if any(map(_is_sparse, grads)):
                return None  # the full path names the problem
            calls.append((group, variant, [with_grad, grads, *columns]))
        return calls


class FusedStep:
    """The one ``step()`` of every drop-in class: a mixin listed before the torch.optim class.

    A drop-in class declares only what is its own: the op (``_op``, a ``fused_optim.ops`` name),
    how many leading lists are viewed as real for complex parameters (``_real_lists``), its state
    and its hyper-parameters. By default a parameter's state is a step counter plus the
    zero-initialised ``_buffers``, and its op row is ``[p, grad, *buffers, step]``; the op's
    keyword arguments are the group's ``_floats`` (``betas`` as ``beta1``, ``beta2``) and
    ``_flags``. Classes whose state depends on options override :meth:`_row`. For the optimizers
    torch.optim lacks, the pure-PyTorch class in :mod:`fused_optim._reference` takes the torch.optim
    class's place (and its step serves the groups torch.optim would have run).

    The routine runs the closure, gathers every group first, then makes one op call per group
    (per device and dtype, and per ``_row`` variant), all checked before the first one writes
    (:class:`StepPlan`). Groups torch.optim must run (:func:`torch_path_needed`) go to its own
    ``step``, as do sparse gradients where the torch optimizer supports them
    (``_sparse_to_torch``); otherwise a sparse gradient is rejected before any state of that
    parameter is touched.
    """

    _name: str  # as torch.optim names the optimizer in its messages
    _op: str
    _real_lists: int
    _buffers: tuple[str, ...] = ()  # zero-initialised state after "step", in torch's key order
    _floats: tuple[str, ...] = ()
    _flags: tuple[str, ...] = ()  # a flag absent from a group (older checkpoints) is False
    _variant_flag: str | None = None  # the keyword argument a row's variant sets
    _sparse_to_torch = False
    _sparse_hint = ""
    state: Any
    param_groups: list[dict[str, Any]]
    _gathered: _Gathered  # set by a step whose gathering the next one may reuse

    def _row(self, group: dict[str, Any], p: Tensor, grad: Tensor, plan: StepPlan
             ) -> tuple[bool, list[Tensor | None]]:
        """``(variant, row)``: the op arguments for ``p`` (None for an absent optional state);
        rows of one variant share a call (see ``_variant_flag``)."""
        state = self._zero_state(p, plan, *self._buffers)
        return False, [p, grad, *(state[key] for key in self._buffers), state["step"]]

    def _kwargs(self, group: dict[str, Any], variant: bool) -> dict[str, Any]:
        kwargs: dict[str, Any] = {}
        for key in self._floats:
            if key == "betas":  # beta1, beta2 (and beta3 for Adan)
                kwargs.update((f"beta{i}", scalar(b)) for i, b in enumerate(group["betas"], 1))
            else:
                kwargs[key] = scalar(group[key])
        for key in self._flags:
            kwargs[key] = bool(group.get(key, False))
        if self._variant_flag is not None:
            kwargs[self._variant_flag] = variant
        return kwargs

    def _zero_state(self, p: Tensor, plan: StepPlan, *buffers: str) -> dict[str, Tensor]:
        """``p``'s state, created on first use as torch.optim does: a step counter, then
        zero-initialised ``buffers`` in torch's key order."""
        state = self.state[p]
        if len(state) == 0:
            plan.note_new_state(p)
            state["step"] = new_step()
            for key in buffers:
                state[key] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return state

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Performs one optimization step (``closure`` re-evaluates the model and returns the loss)."""
        super_step = super().step  # type: ignore[misc]
        if torch_path_needed(self) or (self._sparse_to_torch and any(  # type: ignore[arg-type]
                p.grad is not None and p.grad.is_sparse for g in self.param_groups for p in g["params"])):
            return super_step(closure)
        loss = run_closure(closure)
        op = getattr(ops, self._op)
        cacheable = not torch.compiler.is_compiling()
        gathered = self.__dict__.get("_gathered") if cacheable else None
        calls = gathered.calls(self) if gathered is not None else None
        with StepPlan(self, self._name) as plan:  # type: ignore[arg-type]
            if calls is not None:
                for group, variant, lists in calls:
                    plan.add_call(op, lists, self._kwargs(group, variant))
                plan.run()
                return loss
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
                entries.append((list(group["params"]), _options(group), no_grad, None))
            cacheable = cacheable and not plan.creates_state()
            for i, (group, variants) in enumerate(work):
                cacheable = cacheable and len(variants) <= 1
                for variant in sorted(variants):
                    # The op's lists are the rows' columns, an absent optional state (None) left out.
                    lists = [[t for t in column if t is not None] for column in zip(*variants[variant])]
                    buckets = plan.add(op, lists, self._real_lists, self._kwargs(group, variant))
                    if cacheable and len(buckets) == 1 and buckets[0] is lists:
                        entries[i] = (*entries[i][:3], (variant, lists[0], lists[2:]))  # no grads kept
                    else:
                        cacheable = False
            plan.run()
        if cacheable:
            self._gathered = _Gathered(self, entries)
        return loss
