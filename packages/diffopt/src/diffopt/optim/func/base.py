"""The functional-style optimizer: ``new_params = opt.step(loss, params)``, differentiably.

Example:
    >>> import torch
    >>> import diffopt
    >>> w = torch.tensor([1.0], requires_grad=True)
    >>> opt = diffopt.FuncOptimizer(diffopt.sgd(lr=0.5))
    >>> new = opt.step((2 * w).sum(), {'w': w})
    >>> new['w'], new['w'].requires_grad  # a function of w: differentiable again
    (tensor([0.], grad_fn=<ForeachAddBackward0List>), True)
"""

from __future__ import annotations

from typing import Any

import torch

import optree_core
from diffopt.base import GradientTransformation
from diffopt.update import apply_updates

__all__ = ["FuncOptimizer"]


class _Uninitialized:
    def __repr__(self) -> str:
        return "UninitializedState"


class FuncOptimizer:
    """Turn a :class:`~diffopt.base.GradientTransformation` into ``step(loss, params)``.

    The state is created on the first step from the params it is given. Steps are out of place by
    default, so an outer loss can back-propagate through any number of them.

    Args:
        impl: the functional optimizer.
        inplace: default for :meth:`step`'s ``inplace``.

    Example:
        >>> import torch
        >>> import diffopt
        >>> opt = diffopt.FuncOptimizer(diffopt.adam(0.1))
        >>> p = (torch.tensor([1.0], requires_grad=True),)
        >>> p = opt.step((p[0] ** 2).sum(), p)
        >>> round(float(p[0].detach()), 4)
        0.9
    """

    def __init__(self, impl: GradientTransformation, *, inplace: bool = False) -> None:
        if not isinstance(impl, GradientTransformation):
            raise TypeError(
                f"FuncOptimizer: impl must be a GradientTransformation, got {type(impl).__name__}"
            )
        self.impl = impl
        self.optim_state: Any = _Uninitialized()
        self.inplace = bool(inplace)

    def step(self, loss: torch.Tensor, params: Any, inplace: bool | None = None) -> Any:
        """One optimizer step on ``params`` for ``loss``; returns the new params.

        Args:
            loss: a scalar tensor that depends on ``params``.
            params: a pytree of tensors.
            inplace: update ``params`` in place (non-differentiably) instead of returning new
                tensors; defaults to the constructor's choice.

        Raises:
            RuntimeError: if ``loss`` depends on none of ``params``.
        """
        if inplace is None:
            inplace = self.inplace
        flat_params, treespec = optree_core.tree_flatten(params)
        flat_params = tuple(flat_params)
        if isinstance(self.optim_state, _Uninitialized):
            self.optim_state = self.impl.init(flat_params)
        from diffopt.optim.meta.base import differentiable_grads

        grads = differentiable_grads(loss, flat_params, "FuncOptimizer.step", create_graph=True)
        fused = None if inplace else getattr(self.impl, "_update_and_apply", None)
        if fused is not None:  # a chain: its update and the addition in the fewest ops
            new_params, self.optim_state = fused(grads, self.optim_state, flat_params)
        else:
            updates, self.optim_state = self.impl.update(
                grads, self.optim_state, params=flat_params, inplace=inplace
            )
            new_params = apply_updates(flat_params, updates, inplace=inplace)
        return optree_core.tree_unflatten(treespec, list(new_params))

    def state_dict(self) -> Any:
        """The functional state (a reference, not a copy)."""
        return self.optim_state

    def load_state_dict(self, state_dict: Any) -> None:
        """Replace the functional state."""
        self.optim_state = state_dict
