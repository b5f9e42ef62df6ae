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

    Args:
        g: the gradient flowing into a tensor.

    Returns:
        ``g`` with every NaN set to 0.

    Example:
        >>> import torch
        >>> zero_nan_hook(torch.tensor([float('nan'), 1.0]))
        tensor([0., 1.])
    """
    return torch.where(torch.isnan(g), torch.zeros_like(g), g)


def nan_to_num_hook(nan: float = 0.0, posinf: float | None = None,
                    neginf: float | None = None) -> Callable[[torch.Tensor], torch.Tensor]:
    """A gradient hook factory: :func:`torch.nan_to_num` of the gradient.

    Args:
        nan: the value that replaces NaN.
        posinf: the value that replaces ``+inf`` (``None``: the dtype's largest finite value).
        neginf: the value that replaces ``-inf`` (``None``: the dtype's lowest finite value).

    Returns:
        A function ``hook(g) -> g'`` to pass to :func:`register_hook` or ``Tensor.register_hook``.

    Example:
        >>> import torch
        >>> hook = nan_to_num_hook(nan=-1.0, posinf=9.0)
        >>> hook(torch.tensor([float('nan'), float('inf'), 2.0]))
        tensor([-1.,  9.,  2.])
    """

    def hook(g: torch.Tensor) -> torch.Tensor:
        return torch.nan_to_num(g, nan=nan, posinf=posinf, neginf=neginf)

    return hook


def register_hook(hook: Callable[[torch.Tensor], torch.Tensor | None]) -> GradientTransformation:
    """A stateless transformation that registers ``hook`` on every update tensor needing grad.

    The updates pass through unchanged; the hook acts on the gradients flowing back through them
    during the meta-backward, e.g. to clean the meta-gradient of NaNs.

    Args:
        hook: a function of a gradient tensor returning a replacement (or ``None`` to keep it).

    Returns:
        A :class:`~diffopt.base.GradientTransformation` with an :class:`~diffopt.base.EmptyState`.

    Example:
        >>> import torch
        >>> w = torch.tensor([1.0, 2.0], requires_grad=True)
        >>> tx = register_hook(nan_to_num_hook(nan=0.0))
        >>> (u,), state = tx.update([w * 3.0], tx.init(None))
        >>> (u * torch.tensor([float('nan'), 1.0])).sum().backward()
        >>> u.detach(), w.grad
        (tensor([3., 6.]), tensor([0., 3.]))
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
