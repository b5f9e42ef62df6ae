"""The PyTorch-style optimizer: ``zero_grad()``/``step()`` over ``.grad``, any functional core.

Example:
    >>> import torch
    >>> import diffopt
    >>> w = torch.tensor([1.0], requires_grad=True)
    >>> opt = diffopt.Optimizer([w], diffopt.sgd(lr=0.5))
    >>> (2 * w).sum().backward()
    >>> opt.step()
    >>> w
    tensor([0.], requires_grad=True)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

import optree_core
from diffopt.base import GradientTransformation
from diffopt.update import apply_updates

__all__ = ["Optimizer"]


class Optimizer:
    """A PyTorch-style optimizer driven by a :class:`~diffopt.base.GradientTransformation`.

    Args:
        params: an iterable of tensors (or a pytree of them) to optimize.
        impl: the functional optimizer, e.g. ``diffopt.adam(1e-3)``.

    Attributes:
        param_groups: list of tuples of parameters, one per group.
        state_groups: list of the functional states, one per group.

    Example:
        >>> import torch
        >>> import diffopt
        >>> net = torch.nn.Linear(3, 1)
        >>> opt = diffopt.Optimizer(net.parameters(), diffopt.adam(1e-2))
        >>> len(opt.param_groups[0])
        2
    """

    def __init__(self, params: Iterable[torch.Tensor], impl: GradientTransformation) -> None:
        if not isinstance(impl, GradientTransformation):
            raise TypeError(
                f"{type(self).__name__}: impl must be a GradientTransformation, "
                f"got {type(impl).__name__}"
            )
        if isinstance(params, torch.Tensor):
            raise TypeError(
                f"{type(self).__name__}: params must be an iterable of tensors, "
                "not a single tensor (wrap it in a list)"
            )
        self.impl = impl
        self.param_groups: list[tuple[torch.Tensor, ...]] = []
        self.param_treespecs: list[Any] = []
        self.state_groups: list[Any] = []
        self.add_param_group(params)

    def add_param_group(self, params: Iterable[torch.Tensor]) -> None:
        """Add a group of parameters, with its own freshly initialized state.

        Example:
            >>> import torch
            >>> import diffopt
            >>> opt = diffopt.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
            >>> opt.add_param_group([torch.zeros(2, requires_grad=True)])
            >>> len(opt.param_groups)
            2
        """
        if not isinstance(params, (list, tuple, dict)) and not optree_core.is_namedtuple(params):
            params = list(params)
        leaves, treespec = optree_core.tree_flatten(params)
        for leaf in leaves:
            if not isinstance(leaf, torch.Tensor):
                raise TypeError(
                    f"{type(self).__name__}: parameters must be tensors, found "
                    f"{type(leaf).__name__}"
                )
            if not leaf.is_leaf:
                raise ValueError(
                    f"{type(self).__name__}: can't optimize a non-leaf tensor; "
                    "use a MetaOptimizer for differentiable updates"
                )
        seen = {id(p) for group in self.param_groups for p in group}
        if any(id(leaf) in seen for leaf in leaves):
            raise ValueError(
                f"{type(self).__name__}: some parameters appear in more than one parameter group"
            )
        group = tuple(leaves)
        self.param_groups.append(group)
        self.param_treespecs.append(treespec)
        self.state_groups.append(self.impl.init(group))

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of all parameters (to ``None`` by default, as torch does)."""
        for group in self.param_groups:
            for p in group:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    if p.grad.grad_fn is not None:
                        p.grad.detach_()
                    else:
                        p.grad.requires_grad_(False)
                    p.grad.zero_()

    def state_dict(self) -> tuple[Any, ...]:
        """The functional states of all groups (a tuple of pytrees, references not copies)."""
        return tuple(self.state_groups)

    def load_state_dict(self, state_dict: Iterable[Any]) -> None:
        """Replace the states of all groups with ``state_dict`` (as from :meth:`state_dict`)."""
        states = list(state_dict)
        if len(states) != len(self.param_groups):
            raise ValueError(
                f"{type(self).__name__}.load_state_dict: expected "
                f"{len(self.param_groups)} group states, got {len(states)}"
            )
        for i, (state, current) in enumerate(zip(states, self.state_groups)):
            if optree_core.tree_structure(state) != optree_core.tree_structure(current):
                raise ValueError(
                    f"{type(self).__name__}.load_state_dict: the state of group {i} "
                    "does not match this optimizer's state structure"
                )
        self.state_groups = states

    @torch.no_grad()
    def step(self, closure: Callable[[], torch.Tensor] | None = None) -> torch.Tensor | None:
        """Update the parameters from their ``.grad`` (parameters without one are left alone).

        Args:
            closure: optional function that re-evaluates the model and returns the loss.

        Returns:
            The closure's loss, or ``None``.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for i, (group, state) in enumerate(zip(self.param_groups, self.state_groups)):
            grads = tuple(p.grad for p in group)
            updates, self.state_groups[i] = self.impl.update(
                grads, state, params=group, inplace=True
            )
            apply_updates(group, updates, inplace=True)
        return loss
