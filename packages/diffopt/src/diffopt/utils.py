"""Saving, restoring, cloning and detaching module parameters and optimizer states.

The usual MAML loop saves the module once and restores it after each task::

    state = diffopt.extract_state_dict(net)            # by reference: the original leaves
    for task in tasks:
        for _ in range(inner_steps):
            inner_opt.step(inner_loss(net, task))
        outer_loss(net, task).backward()
        diffopt.recover_state_dict(net, state)

Example:
    >>> import torch
    >>> import diffopt
    >>> net = torch.nn.Linear(2, 1)
    >>> saved = extract_state_dict(net, by='deepcopy')
    >>> with torch.no_grad():
    ...     _ = net.weight.add_(1.0)
    >>> recover_state_dict(net, saved)
    >>> bool(torch.equal(net.weight, saved.params[0]['weight']))
    True
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from typing import Any, Literal, NamedTuple

import torch
from torch import nn

import optree_core

__all__ = [
    "ModuleState",
    "extract_state_dict",
    "module_clone",
    "module_detach_",
    "recover_state_dict",
    "stop_gradient",
]

CopyMode = Literal["reference", "copy", "deepcopy", "ref", "clone", "deepclone"]


class ModuleState(NamedTuple):
    """A snapshot of a module: one ``{name: tensor}`` dict per submodule (in ``modules()`` order).

    Built by :func:`extract_state_dict` and consumed by :func:`recover_state_dict`.

    Attributes:
        params: parameter dicts, one per submodule.
        buffers: buffer dicts, one per submodule (empty dicts when saved without buffers).
        visual_contents: reserved for graph visualization (``None``).
        detach_buffers: whether :func:`recover_state_dict` detaches the buffers it restores.

    Example:
        >>> import torch
        >>> net = torch.nn.Sequential(torch.nn.Linear(2, 1), torch.nn.BatchNorm1d(1))
        >>> state = extract_state_dict(net)
        >>> [sorted(p) for p in state.params], sorted(state.buffers[2])
        ([[], ['bias', 'weight'], ['bias', 'weight']], ['num_batches_tracked', 'running_mean', 'running_var'])
    """

    params: tuple[dict[str, torch.Tensor | None], ...]
    buffers: tuple[dict[str, torch.Tensor | None], ...]
    visual_contents: dict | None = None
    detach_buffers: bool = False


def _replicator(by: str, device: Any = None):
    """The per-tensor copy function for a copy mode."""
    mode = {"ref": "reference", "clone": "copy", "deepclone": "deepcopy"}.get(by, by)
    if mode not in ("reference", "copy", "deepcopy"):
        raise ValueError(f"by must be 'reference', 'copy' or 'deepcopy', got {by!r}")
    target_device = torch.device(device) if device is not None else None

    def replicate(t: Any) -> Any:
        if not isinstance(t, torch.Tensor):
            return t
        if mode == "reference":
            return t if target_device is None else t.to(target_device)
        if mode == "copy":  # a graph-connected copy, cloned where the tensor is, then moved
            out = t.clone()
            return out if target_device is None else out.to(target_device)
        out = t.detach().clone()
        if target_device is not None:
            out = out.to(target_device)
        return out.requires_grad_(t.requires_grad)

    return replicate


def extract_state_dict(target: Any, *, by: CopyMode = "reference", device: Any = None,
                       with_buffers: bool = True, detach_buffers: bool = False,
                       enable_visual: bool = False, visual_prefix: str = "") -> Any:
    """Snapshot the parameters (and buffers) of a module, or the state of an optimizer.

    Args:
        target: an :class:`torch.nn.Module`, a :class:`~diffopt.MetaOptimizer`, a
            :class:`~diffopt.Optimizer` or a :class:`~diffopt.FuncOptimizer`.
        by: ``'reference'`` keeps the tensors themselves, ``'copy'`` clones them (the clones stay
            connected to the autograd graph), ``'deepcopy'`` makes detached clones with the same
            ``requires_grad``.
        device: move the copies to this device.
        with_buffers: also save the buffers (modules only).
        detach_buffers: make :func:`recover_state_dict` restore detached buffers.
        enable_visual: record, in the result's ``visual_contents``, a name for each of the
            module's parameters as they are now (``visual_prefix + dotted name``), so that
            :func:`diffopt.visual.make_dot` labels them when given the result. Modules only.
        visual_prefix: the prefix of those names, e.g. ``'step0.'``.

    Returns:
        A :class:`ModuleState` for modules, the tuple of group states for optimizers.

    Example:
        >>> import torch
        >>> import diffopt
        >>> net = torch.nn.Linear(2, 1)
        >>> opt = diffopt.MetaAdam(net)
        >>> len(extract_state_dict(opt, by='deepcopy'))
        1
    """
    if not isinstance(visual_prefix, str):
        raise TypeError(f"visual_prefix must be a string, got {type(visual_prefix).__name__}")
    replicate = _replicator(by, device)
    if isinstance(target, nn.Module):
        # The names go to the parameters themselves (not to their copies): they are the tensors
        # a later graph of the module's outputs runs through.
        visual_contents = OrderedDict(
            (visual_prefix + name, p) for name, p in target.named_parameters()
        ) if enable_visual else None
        params, buffers = [], []
        for module in target.modules():
            params.append(OrderedDict(
                (name, replicate(p)) for name, p in module._parameters.items()))
            buffers.append(OrderedDict(
                (name, replicate(b)) for name, b in module._buffers.items())
                if with_buffers else OrderedDict())
        return ModuleState(params=tuple(params), buffers=tuple(buffers),
                           visual_contents=visual_contents, detach_buffers=detach_buffers)
    state = _optimizer_state(target)
    if state is None:
        raise TypeError(f"extract_state_dict: expected an nn.Module or an optimizer, got "
                        f"{type(target).__name__}")
    return optree_core.tree_map(replicate, state)


def _optimizer_state(target: Any) -> Any:
    from diffopt.optim.base import Optimizer
    from diffopt.optim.func.base import FuncOptimizer
    from diffopt.optim.meta.base import MetaOptimizer

    if isinstance(target, (MetaOptimizer, Optimizer, FuncOptimizer)):
        return target.state_dict()
    return None


def submodules(module: nn.Module) -> list[nn.Module]:
    """``list(module.modules())``, in its order (pre-order, each module once), without building
    the dotted names ``modules()`` also computes: MAML builds an optimizer and restores the
    module once per task."""
    out = [module]
    seen = {id(module)}

    def visit(parent: nn.Module) -> None:
        for child in parent._modules.values():
            if child is not None and id(child) not in seen:
                seen.add(id(child))
                out.append(child)
                if child._modules:
                    visit(child)

    visit(module)
    return out


def recover_state_dict(target: Any, state: Any) -> None:
    """Put a snapshot from :func:`extract_state_dict` back into a module or an optimizer.

    Args:
        target: the module or optimizer the snapshot was taken from (or one shaped like it).
        state: the snapshot.

    Raises:
        ValueError: if the snapshot does not fit the target's structure.

    Example:
        >>> import torch
        >>> import diffopt
        >>> net = torch.nn.Linear(2, 1)
        >>> saved = extract_state_dict(net)
        >>> opt = diffopt.MetaSGD(net, lr=0.1)
        >>> opt.step(net(torch.ones(1, 2)).sum())
        >>> net.weight.is_leaf
        False
        >>> recover_state_dict(net, saved)
        >>> net.weight.is_leaf
        True
    """
    if isinstance(target, nn.Module):
        if not isinstance(state, ModuleState):
            raise TypeError("recover_state_dict: a module needs a ModuleState from "
                            "extract_state_dict")
        modules = submodules(target)
        if len(modules) != len(state.params):
            raise ValueError(f"recover_state_dict: the snapshot has {len(state.params)} "
                             f"submodules, the module {len(modules)}")
        for module, params, buffers in zip(modules, state.params, state.buffers):
            if params.keys() != module._parameters.keys():
                raise ValueError(f"recover_state_dict: parameter names differ for "
                                 f"{type(module).__name__}: {sorted(params)} vs "
                                 f"{sorted(module._parameters)}")
            for name, p in params.items():
                module._parameters[name] = p
            for name, b in buffers.items():
                if b is not None and state.detach_buffers:
                    b = b.detach().requires_grad_(b.requires_grad)
                module._buffers[name] = b
        return
    if _optimizer_state(target) is None:
        raise TypeError(f"recover_state_dict: expected an nn.Module or an optimizer, got "
                        f"{type(target).__name__}")
    target.load_state_dict(state)


# Attribute values that copy.deepcopy returns as they are (or equal and immutable).
_ATOMIC = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device)


def _copy_plain_module(module: nn.Module, memo: dict[int, Any]) -> nn.Module | None:
    """What ``copy.deepcopy(module, memo)`` builds, for the common modules (torch's own layers
    and containers), ~8x faster; ``None`` for any module it cannot vouch for.

    Every module in the tree must be copied by deepcopy's default protocol (no ``__deepcopy__``,
    ``__reduce_ex__``, ``__reduce__`` or ``__getnewargs*__`` of its own; a ``__getstate__``
    giving a dict and a ``__setstate__`` are used as deepcopy uses them), hold no hooks, and
    have only attributes that deepcopy would keep or rebuild the same way: immutable
    values (and tuples and lists of them), the parameter and buffer dicts (their tensors must be in
    ``memo``, as module_clone puts them, so deepcopy would keep them too), the submodule dict and
    the non-persistent buffer names. deepcopy spends most of its time in the generic reduce
    machinery for the dozen mostly empty dicts every module carries.
    """
    copied = memo.get(id(module))
    if copied is not None:  # a submodule met twice stays shared, as with deepcopy
        return copied
    cls = type(module)
    if (cls.__reduce_ex__ is not object.__reduce_ex__ or cls.__reduce__ is not object.__reduce__
            or any(getattr(cls, name, None) is not None
                   for name in ("__deepcopy__", "__getnewargs_ex__", "__getnewargs__"))):
        return None
    original = module.__getstate__()
    if type(original) is not dict:
        return None
    # deepcopy's own steps for such an object: a bare instance, registered in the memo before
    # its state is copied (so a cycle ends there), then __setstate__ with the copied state.
    clone = cls.__new__(cls)
    memo[id(module)] = clone
    state = {}
    for name, value in original.items():
        kind = type(value)
        if kind in _ATOMIC or (kind is tuple and all(type(v) in _ATOMIC for v in value)):
            state[name] = value
        elif kind is list and all(type(v) in _ATOMIC for v in value):  # conv's padding list
            state[name] = list(value)
        elif name in ("_parameters", "_buffers") and kind in (dict, OrderedDict):
            if any(t is not None and id(t) not in memo for t in value.values()):
                return None
            state[name] = kind((key, None if t is None else memo[id(t)])
                               for key, t in value.items())
        elif name == "_modules" and kind in (dict, OrderedDict):
            children = kind()
            for key, child in value.items():
                children[key] = None if child is None else _copy_plain_module(child, memo)
                if child is not None and children[key] is None:
                    return None
            state[name] = children
        elif name == "_non_persistent_buffers_set" and kind is set:
            state[name] = set(value)
        elif kind in (dict, OrderedDict) and not value:  # the hook dicts, when empty
            state[name] = kind()
        else:
            return None
    clone.__setstate__(state)
    return clone


def module_clone(target: Any, *, by: CopyMode = "reference", detach_buffers: bool = False,
                 device: Any = None) -> Any:
    """Clone a module, an optimizer's state, or a pytree of tensors.

    Args:
        target: an :class:`torch.nn.Module`, an optimizer, or a pytree of tensors.
        by: how tensors are copied (see :func:`extract_state_dict`); for a module the structure
            is always a new object, and ``'reference'`` shares the tensors.
        detach_buffers: detach the buffers of a cloned module.
        device: move the copies to this device.

    Returns:
        The clone.

    Example:
        >>> import torch
        >>> net = torch.nn.Linear(2, 1)
        >>> twin = module_clone(net, by='copy')
        >>> twin.weight.grad_fn is not None  # a clone connected to net.weight
        True
    """
    replicate = _replicator(by, device)
    if isinstance(target, nn.Module):
        memo: dict[int, Any] = {}
        for tensor in list(target.parameters()) + list(target.buffers()):
            memo[id(tensor)] = tensor  # deepcopy must not copy tensors; we replace them below
        clone = _copy_plain_module(target, dict(memo))
        if clone is None:
            clone = copy.deepcopy(target, memo)
        replaced: dict[int, torch.Tensor] = {}
        for source, module in zip(target.modules(), clone.modules()):
            for name, p in source._parameters.items():
                if p is not None:
                    if id(p) not in replaced:
                        replaced[id(p)] = replicate(p)
                    module._parameters[name] = replaced[id(p)]
            for name, b in source._buffers.items():
                if b is not None:
                    new = replicate(b)
                    module._buffers[name] = new.detach() if detach_buffers else new
        return clone
    state = _optimizer_state(target)
    if state is not None:
        return optree_core.tree_map(replicate, state)
    return optree_core.tree_map(replicate, target)


def _detach_tensor_(t: Any) -> Any:
    if isinstance(t, torch.Tensor):
        requires_grad = t.requires_grad
        t.detach_()
        t.requires_grad_(requires_grad)
    return t


def module_detach_(target: Any) -> Any:
    """Detach, in place, every parameter and buffer of a module (or tensor of a state or tree).

    Each tensor keeps its value and ``requires_grad`` flag but forgets its history, so the next
    unrolled segment starts from leaves (truncated back-propagation).

    Args:
        target: an :class:`torch.nn.Module`, an optimizer (its state is detached), or a pytree of
            tensors (detached with ``Tensor.detach_``).

    Returns:
        ``target``.

    Example:
        >>> import torch
        >>> import diffopt
        >>> net = torch.nn.Linear(1, 1)
        >>> diffopt.MetaSGD(net, lr=0.1).step(net(torch.ones(1, 1)).sum())
        >>> net.weight.is_leaf
        False
        >>> module_detach_(net).weight.is_leaf, net.weight.requires_grad
        (True, True)
    """
    if isinstance(target, nn.Module):
        for module in target.modules():
            for name, p in module._parameters.items():
                if p is not None:
                    module._parameters[name] = p.detach().requires_grad_(p.requires_grad)
            for name, b in module._buffers.items():
                if b is not None:
                    module._buffers[name] = b.detach().requires_grad_(b.requires_grad)
        return target
    state = _optimizer_state(target)
    if state is not None:
        detached = optree_core.tree_map(
            lambda t: t.detach().requires_grad_(t.requires_grad)
            if isinstance(t, torch.Tensor) else t, state)
        target.load_state_dict(detached)
        return target
    optree_core.tree_map(_detach_tensor_, target)
    return target


def stop_gradient(target: Any) -> None:
    """Cut the autograd history of a module, an optimizer state, or a pytree of tensors, in place.

    The same as :func:`module_detach_`, without the return value (TorchOpt's name).

    Args:
        target: an :class:`torch.nn.Module`, an optimizer, or a pytree of tensors.

    Example:
        >>> import torch
        >>> w = torch.ones(1, requires_grad=True)
        >>> x = w * 2
        >>> stop_gradient(x)
        >>> x, x.grad_fn is None
        (tensor([2.], requires_grad=True), True)
    """
    module_detach_(target)
