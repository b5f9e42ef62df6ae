"""Gradient clipping by the global norm of all updates.

Example:
    >>> import torch
    >>> tx = clip_grad_norm(max_norm=1.0)
    >>> tx.update([torch.tensor([3.0, 4.0])], tx.init(None))[0]
    [tensor([0.6000, 0.8000])]
"""

from __future__ import annotations

import math

import torch

from diffopt.base import EmptyState, GradientTransformation
from diffopt.transform._leafwise import flatten_updates, unflatten
from diffopt.tree_math import tree_norm

__all__ = ["ClipState", "clip_grad_norm"]

ClipState = EmptyState


def clip_grad_norm(max_norm: float, norm_type: float = 2.0,
                   error_if_nonfinite: bool = False) -> GradientTransformation:
    """Scale all updates down so that their joint ``norm_type``-norm is at most ``max_norm``.

    Same rule as :func:`torch.nn.utils.clip_grad_norm_`: each update is multiplied by
    ``min(1, max_norm / (norm + 1e-6))``.

    Args:
        max_norm: the largest norm allowed.
        norm_type: the norm (``2.0``, ``1.0``, ``inf``...).
        error_if_nonfinite: raise if the norm is NaN or infinite.

    Returns:
        A stateless :class:`~diffopt.base.GradientTransformation`.

    Example:
        >>> import torch
        >>> tx = clip_grad_norm(10.0)
        >>> tx.update([torch.tensor([3.0, 4.0])], tx.init(None))[0]
        [tensor([3., 4.])]
    """
    if not max_norm >= 0.0:
        raise ValueError(f"clip_grad_norm: max_norm must be non-negative, got {max_norm}")

    def init_fn(params):
        del params
        return ClipState()

    def update_fn(updates, state, *, params=None, inplace=True):
        del params, inplace
        treespec, grads, _ = flatten_updates("clip_grad_norm", updates)
        present = [g for g in grads if g is not None]
        if not present:
            return updates, state
        total = tree_norm(present, float(norm_type) if norm_type != "inf" else math.inf)
        if error_if_nonfinite and not bool(torch.isfinite(total)):
            raise RuntimeError(
                f"clip_grad_norm: the total norm of order {norm_type} of the gradients is "
                "non-finite, so it cannot be clipped"
            )
        factor = torch.clamp(max_norm / (total + 1e-6), max=1.0)
        out = [None if g is None else g * factor.to(g.dtype) for g in grads]
        return unflatten(treespec, out), state

    return GradientTransformation(init_fn, update_fn)


