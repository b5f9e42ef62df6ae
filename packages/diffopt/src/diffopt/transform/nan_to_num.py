"""Replace NaN and infinite entries of the updates.

Example:
    >>> import torch
    >>> tx = nan_to_num(nan=0.0, posinf=1.0)
    >>> tx.update([torch.tensor([float('nan'), float('inf')])], tx.init(None))[0]
    [tensor([0., 1.])]
"""

from __future__ import annotations

import torch

from diffopt.base import EmptyState, GradientTransformation
from diffopt.transform._leafwise import flatten_updates, unflatten

__all__ = ["NanToNumState", "nan_to_num"]

NanToNumState = EmptyState


def nan_to_num(nan: float = 0.0, posinf: float | None = None,
               neginf: float | None = None) -> GradientTransformation:
    """Leaf-wise :func:`torch.nan_to_num` of the updates.

    With ``update(..., inplace=True)`` (the default) a leaf that does not require grad is
    rewritten in place and returned as the very same tensor, as in TorchOpt; one that requires
    grad is replaced by a new tensor, so that no graph is corrupted.

    Args:
        nan: value for NaN entries.
        posinf: value for ``+inf`` (default: the dtype's largest finite value).
        neginf: value for ``-inf`` (default: the dtype's lowest finite value).

    Returns:
        A stateless :class:`~diffopt.base.GradientTransformation`.

    Example:
        >>> import torch
        >>> tx = nan_to_num()
        >>> tx.update([torch.tensor([1.0])], tx.init(None))[0]
        [tensor([1.])]
    """

    def init_fn(params):
        del params
        return NanToNumState()

    def replace(g: torch.Tensor, inplace: bool) -> torch.Tensor:
        # In place only where autograd cannot be hurt: a tensor that requires grad may be saved
        # for a backward pass (or be a leaf, which torch refuses to modify), so it is copied.
        if inplace and not g.requires_grad:
            return g.nan_to_num_(nan=nan, posinf=posinf, neginf=neginf)
        return torch.nan_to_num(g, nan=nan, posinf=posinf, neginf=neginf)

    def update_fn(updates, state, *, params=None, inplace=True):
        del params
        treespec, grads, _ = flatten_updates("nan_to_num", updates)
        out = [None if g is None else replace(g, inplace) for g in grads]
        return unflatten(treespec, out), state

    return GradientTransformation(init_fn, update_fn)
