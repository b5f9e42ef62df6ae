"""The differentiable meta-optimizer: ``step(loss)`` rebuilds a module's parameters out of place.

After ``step``, each parameter of the module is a new tensor that is a function of the old one
(and of the optimizer state), so an outer loss computed with the module back-propagates through
every inner step to the original parameters and to any meta-parameters (a learned learning rate,
a learned initialization...). Use :func:`diffopt.extract_state_dict` /
:func:`diffopt.recover_state_dict` to reset the module between tasks.

Example:
    >>> import torch
    >>> import diffopt
    >>> net = torch.nn.Linear(1, 1, bias=False)
    >>> w0 = net.weight
    >>> opt = diffopt.MetaSGD(net, lr=0.5)
    >>> opt.step((net.weight ** 2).sum())       # w1 = w0 - 0.5 * 2 * w0 = 0
    >>> (net.weight ** 2).sum().backward()
    >>> w0.grad
    tensor([[0.]])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

import optree_core
from diffopt.base import GradientTransformation
from diffopt.update import add_leaves
from diffopt.utils import submodules

__all__ = ["MetaOptimizer", "differentiable_grads"]


def differentiable_grads(
    loss: torch.Tensor, params: Sequence[torch.Tensor], where: str, *, create_graph: bool = True
) -> tuple[torch.Tensor | None, ...]:
    """``d loss / d params`` with a graph for higher derivatives; ``None`` for unused params.

    The meta-optimizers call it in ``step(loss)``; its checks turn the usual autograd mistakes
    (a stale loss, a loss that does not use the parameters) into errors that say what to do.

    Args:
        loss: a scalar tensor computed from ``params``.
        params: the tensors to differentiate with respect to.
        where: the caller's name, used at the start of every error message.
        create_graph: keep the graph of the derivative (needed to differentiate through the step).

    Returns:
        A tuple with one gradient per parameter (``None`` for parameters the loss does not use).

    Raises:
        TypeError: if ``loss`` is not a tensor.
        ValueError: if ``loss`` is not a scalar.
        RuntimeError: if ``loss`` depends on none of ``params``, or is computed under
            ``torch.func.vmap`` (whose batched tensors autograd.grad cannot see through; the
            message names the functional-core way to write it).

    Example:
        >>> import torch
        >>> w = torch.tensor([1.0, 2.0], requires_grad=True)
        >>> unused = torch.tensor(0.0, requires_grad=True)
        >>> g, g_unused = differentiable_grads((w ** 3).sum(), [w, unused], 'example')
        >>> g.detach(), g_unused, g.requires_grad  # 3 w^2, differentiable again
        (tensor([ 3., 12.]), None, True)
    """
    if not isinstance(loss, torch.Tensor):
        raise TypeError(f"{where}: loss must be a tensor, got {type(loss).__name__}")
    if loss.numel() != 1:
        raise ValueError(f"{where}: loss must be a scalar, got shape {tuple(loss.shape)}")
    if not loss.requires_grad and torch._C._are_functorch_transforms_active():
        raise RuntimeError(
            f"{where}: torch.autograd.grad cannot differentiate through a torch.func transform "
            "(vmap hides the parameters' autograd history from it); inside torch.func use the "
            "optimizer's functional core instead: tx = opt.impl, state = tx.init(params), "
            "grads = torch.func.grad(loss_fn)(params, ...), then tx.update(grads, state, "
            "params=params, inplace=False) and diffopt.apply_updates(..., inplace=False)"
        )
    if not loss.requires_grad:
        raise RuntimeError(
            f"{where}: the loss does not depend on the parameters being optimized (it does not "
            "require grad); compute it from the module's current parameters"
        )
    grads = torch.autograd.grad(loss, params, create_graph=create_graph, allow_unused=True)
    if params and all(g is None for g in grads):
        raise RuntimeError(
            f"{where}: the loss does not depend on any of the parameters being optimized; "
            "compute it from the module's current parameters (after recover_state_dict or a "
            "previous step, use the module again rather than a stale output)"
        )
    return grads


class MetaOptimizer:
    """A differentiable optimizer for the parameters of a :class:`torch.nn.Module`.

    Args:
        module: the module whose parameters (those with ``requires_grad=True``) are optimized.
        impl: the functional optimizer, e.g. ``diffopt.sgd(0.1)``.

    Attributes:
        param_containers_groups: per group, the list of ``(submodule._parameters, name)`` slots.
        state_groups: per group, the functional state.

    Example:
        >>> import torch
        >>> import diffopt
        >>> opt = diffopt.MetaOptimizer(torch.nn.Linear(2, 2), diffopt.sgd(0.1))
        >>> len(opt.state_dict())
        1
    """

    def __init__(self, module: nn.Module, impl: GradientTransformation) -> None:
        if not isinstance(impl, GradientTransformation):
            raise TypeError(
                f"{type(self).__name__}: impl must be a GradientTransformation, "
                f"got {type(impl).__name__}"
            )
        self.impl = impl
        self.param_containers_groups: list[list[tuple[dict, str, int]]] = []
        self._first_slots: list[list[tuple[dict, str]]] = []
        self._group_params: list[tuple[torch.Tensor, ...]] = []
        # Set by MetaSGD when the update is plain ``p - lr * g`` (no state): one fused op for all
        # parameters instead of a multiply and an add for each.
        self._plain_sgd_lr: float | None = None
        self.state_groups: list[Any] = []
        self.add_param_group(module)

    def add_param_group(self, module: nn.Module) -> None:
        """Add the trainable parameters of ``module`` as a new group with a fresh state.

        Tied parameters (one tensor in several places) are optimized once and written back to
        every place.
        """
        if not isinstance(module, nn.Module):
            raise TypeError(
                f"{type(self).__name__}: expected an nn.Module, got {type(module).__name__}"
            )
        slots: list[tuple[dict, str, int]] = []
        first: list[tuple[dict, str]] = []  # the first slot of each distinct parameter
        index_of: dict[int, int] = {}
        params: list[torch.Tensor] = []
        taken = {id(p) for group in self._group_params for p in group}
        for submodule in submodules(module):
            container = submodule._parameters
            for name, tensor in container.items():
                if tensor is None or not tensor.requires_grad:
                    continue
                key = id(tensor)
                if key in taken:
                    raise ValueError(
                        f"{type(self).__name__}: parameter {name!r} already belongs "
                        "to another group"
                    )
                index = index_of.get(key)
                if index is None:
                    index = index_of[key] = len(params)
                    params.append(tensor)
                    first.append((container, name))
                slots.append((container, name, index))
        if not params:
            raise ValueError(
                f"{type(self).__name__}: the module has no parameter that requires grad"
            )
        self.param_containers_groups.append(slots)
        self._first_slots.append(first)
        self._group_params.append(tuple(params))
        self.state_groups.append(self.impl.init(tuple(params)))

    def step(self, loss: torch.Tensor) -> None:
        """One differentiable step: compute ``d loss / d params`` and rebuild the parameters.

        Args:
            loss: a scalar computed from the module's current parameters.

        Raises:
            RuntimeError: if ``loss`` does not depend on the module's parameters.
        """
        groups = [[container[name] for container, name in first] for first in self._first_slots]
        flat = groups[0] if len(groups) == 1 else [p for group in groups for p in group]
        grads = differentiable_grads(loss, flat, f"{type(self).__name__}.step")
        offset = 0
        lr = self._plain_sgd_lr
        fused = getattr(self.impl, "_update_and_apply", None)
        for i, (slots, group) in enumerate(zip(self.param_containers_groups, groups)):
            group_grads = grads[offset:offset + len(group)]
            offset += len(group)
            if lr is not None:
                new_params = add_leaves(group, group_grads, -lr)
            elif fused is not None:  # a chain: its update and the addition in the fewest ops
                new_params, self.state_groups[i] = fused(
                    group_grads, self.state_groups[i], tuple(group))
            else:
                updates, self.state_groups[i] = self.impl.update(
                    group_grads, self.state_groups[i], params=tuple(group), inplace=False
                )
                new_params = add_leaves(group, list(updates))
            for container, name, index in slots:
                container[name] = new_params[index]

    def state_dict(self) -> tuple[Any, ...]:
        """The functional states of all groups (references, not copies)."""
        return tuple(self.state_groups)

    def load_state_dict(self, state_dict: Sequence[Any]) -> None:
        """Replace the states of all groups with ``state_dict`` (as from :meth:`state_dict`)."""
        states = list(state_dict)
        if len(states) != len(self.state_groups):
            raise ValueError(
                f"{type(self).__name__}.load_state_dict: expected "
                f"{len(self.state_groups)} group states, got {len(states)}"
            )
        for i, (state, current) in enumerate(zip(states, self.state_groups)):
            if optree_core.tree_structure(state) != optree_core.tree_structure(current):
                raise ValueError(
                    f"{type(self).__name__}.load_state_dict: the state of group {i} "
                    "does not match this optimizer's state structure"
                )
        self.state_groups = states
