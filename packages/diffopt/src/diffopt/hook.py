"""Tensor hooks as transformations: register a hook on every update tensor.

The hook then acts on the gradient that flows back through the updates during the
meta-backward, e.g. to stop a NaN coming from downstream before it reaches the parameters.

Example:
    >>> import torch
    >>> w = torch.tensor([1.0, 2.0], requires_grad=True)
    >>> tx = register_hook(zero_nan_hook)
    >>> (u,), _ = tx.update([w * 1.0], tx.init(None))
    >>> (u * torch.tensor([float('nan'), 1.0])).sum().backward()
    >>> w.grad
    tensor([0., 1.])
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from diffopt.base import EmptyState, GradientTransformation
from diffopt.transform._leafwise import flatten_updates

__all__ = ["nan_to_num_hook", "register_hook", "zero_nan_hook"]


def zero_nan_hook(g: torch.Tensor) -> torch.Tensor:
    """A gradient hook that replaces NaN entries of the gradient with zeros.

    Example:
        >>> import torch
        >>> zero_nan_hook(torch.tensor([float('nan'), 1.0]))
        tensor([0., 1.])
    """
    return torch.where(torch.isnan(g), torch.zeros_like(g), g)


def nan_to_num_hook(nan: float = 0.0, posinf: float | None = None,
                    neginf: float | None = None) -> Callable[[torch.Tensor], torch.Tensor]:
    """A gradient hook factory: :func:`torch.nan_to_num` of the gradient.

    Example:
        >>> import torch
        >>> nan_to_num_hook(nan=-1.0)(torch.tensor([float('nan')]))
        tensor([-1.])
    """

    def hook(g: torch.Tensor) -> torch.Tensor:
        return torch.nan_to_num(g, nan=nan, posinf=posinf, neginf=neginf)

    return hook


def register_hook(hook: Callable[[torch.Tensor], torch.Tensor | None]) -> GradientTransformation:
    """A stateless transformation that registers ``hook`` on every update tensor needing grad.

    The hook then acts on the gradients flowing back through the updates, e.g. to clean the
    meta-gradient of NaNs.

    Example:
        >>> import torch
        >>> tx = register_hook(zero_nan_hook)
        >>> tx.update([torch.tensor(1.0)], tx.init(None))[0]
        [tensor(1.)]
    """

    def init_fn(params):
        del params
        return EmptyState()

    def update_fn(updates, state, *, params=None, inplace=True):
        del params, inplace
        _, grads, _ = flatten_updates("register_hook", updates)
        for g in grads:
            if g is not None and g.requires_grad:
                g.register_hook(hook)
        return updates, state

    return GradientTransformation(init_fn, update_fn)
