r"""Rprop's sign-based update with per-element step sizes (Riedmiller & Braun, 1993), as
torch.optim.Rprop.

Each element keeps its own step size :math:`s`, grown by :math:`\eta_+` while the gradient keeps
its sign and shrunk by :math:`\eta_-` when it flips (a flip also skips that element's move and
forgets the gradient):

.. math::
    s_t = \mathrm{clip}(s_{t-1} f_t, s_{\min}, s_{\max}),\quad
    f_t = \eta_+ \text{ if } g_t g_{t-1} > 0,\ \eta_- \text{ if } g_t g_{t-1} < 0,\ 1 \text{ otherwise},\\
    u_t = -\mathrm{sign}(g_t)\, s_t \quad (g_t := 0 \text{ where it flipped})

The update already includes the step size (the learning rate only seeds :math:`s_0`), so the
alias adds no ``-lr`` scaling.

Example:
    >>> import torch
    >>> tx = scale_by_rprop(lr=0.1)
    >>> tx.update([torch.tensor([2.0, -3.0])], tx.init([torch.zeros(2)]))[0]
    [tensor([-0.1000,  0.1000])]
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from diffopt.base import GradientTransformation
from diffopt.transform._leafwise import (
    check_leaf,
    flatten_updates,
    tensor_hyperparams,
    unflatten,
    zeros_like_params,
)

__all__ = ["ScaleByRpropState", "scale_by_accelerated_rprop", "scale_by_rprop"]


class ScaleByRpropState(NamedTuple):
    """State of :func:`scale_by_rprop`: the previous (kept) gradients and the step sizes.

    Attributes:
        prev: the previous step's gradients, zero where their sign flipped.
        step_size: the per-element step sizes, starting at ``lr``.

    Example:
        >>> import torch
        >>> scale_by_rprop(lr=0.5).init({'w': torch.zeros(2)}).step_size
        {'w': tensor([0.5000, 0.5000])}
    """

    prev: object
    step_size: object


def _check(name: str, lr, etas: tuple[float, float], step_sizes: tuple[float, float]) -> None:
    if not isinstance(lr, torch.Tensor) and not lr >= 0.0:
        raise ValueError(f"{name}: invalid learning rate {lr}; it must be >= 0")
    if not 0.0 < etas[0] < 1.0 < etas[1]:
        raise ValueError(f"{name}: etas must satisfy 0 < etaminus < 1 < etaplus, got {tuple(etas)}")
    if len(step_sizes) != 2:
        raise ValueError(f"{name}: step_sizes must be a pair (min, max), got {step_sizes!r}")


def _init_fn(name: str, lr):
    def init_fn(params):
        prev = zeros_like_params(name, params)
        if isinstance(lr, torch.Tensor):  # a (meta-learned) tensor lr keeps its graph
            step_size = zeros_like_params(name, params)
            from diffopt.pytree import tree_map

            return ScaleByRpropState(prev=prev, step_size=tree_map(lambda z: z + lr.to(z.dtype), step_size))
        return ScaleByRpropState(prev=prev, step_size=zeros_like_params(name, params, fill_value=lr))

    return init_fn


def scale_by_rprop(lr=1e-2, etas: tuple[float, float] = (0.5, 1.2),
                   step_sizes: tuple[float, float] = (1e-6, 50.0)) -> GradientTransformation:
    """Replace updates by Rprop's signed, per-element adaptive steps.

    Args:
        lr: the initial step size of every element (a number, or a tensor).
        etas: ``(etaminus, etaplus)``, the factors shrinking and growing the step sizes.
        step_sizes: ``(min, max)``, the bounds of the step sizes.

    Returns:
        A :class:`~diffopt.base.GradientTransformation` with :class:`ScaleByRpropState`.

    Example:
        >>> import torch
        >>> tx = scale_by_rprop(lr=0.1, etas=(0.5, 2.0))
        >>> state = tx.init([torch.zeros(1)])
        >>> _, state = tx.update([torch.tensor([1.0])], state)
        >>> tx.update([torch.tensor([1.0])], state)[0]  # same sign: the step doubles
        [tensor([-0.2000])]
    """
    name = "scale_by_rprop"
    _check(name, lr, etas, step_sizes)
    # Numbers, or tensors (learned, perhaps), which stay in the graph.
    etaminus, etaplus = etas
    lo, hi = step_sizes

    def fill(like: torch.Tensor, value) -> torch.Tensor:
        if isinstance(value, torch.Tensor):
            return value.to(like.dtype).expand_as(like)
        return torch.full_like(like, value)

    def update_fn(updates, state, *, params=None, inplace=True):
        del params, inplace
        treespec, grads, (prevs, sizes) = flatten_updates(name, updates, state.prev, state.step_size)
        new_updates, new_prevs, new_sizes = [], [], []
        for i, (g, prev, s) in enumerate(zip(grads, prevs, sizes)):
            if g is None:
                new_updates.append(None)
                new_prevs.append(prev)
                new_sizes.append(s)
                continue
            check_leaf(name, i, g, prev)
            agreement = (g * prev).detach()  # only its sign matters (piecewise constant)
            flipped = agreement < 0
            factor = torch.where(agreement > 0, fill(s, etaplus),
                                 torch.where(flipped, fill(s, etaminus), torch.ones_like(s)))
            s = torch.minimum(torch.maximum(s * factor, fill(s, lo)), fill(s, hi))
            kept = torch.where(flipped, torch.zeros_like(g), g)
            new_updates.append(-(kept.sign() * s))
            new_prevs.append(kept)
            new_sizes.append(s)
        new_state = ScaleByRpropState(prev=unflatten(treespec, new_prevs), step_size=unflatten(treespec, new_sizes))
        return unflatten(treespec, new_updates), new_state

    return GradientTransformation(_init_fn(name, lr), update_fn)


def scale_by_accelerated_rprop(lr=1e-2, etas: tuple[float, float] = (0.5, 1.2),
                               step_sizes: tuple[float, float] = (1e-6, 50.0)) -> GradientTransformation:
    """:func:`scale_by_rprop` computed by fused-optim's fused, differentiable Rprop op.

    Same arguments, state and results as :func:`scale_by_rprop`; each update is one fused op call
    with a hand-written backward.

    Args:
        lr, etas, step_sizes: as in :func:`scale_by_rprop`.

    Returns:
        A :class:`~diffopt.base.GradientTransformation` with :class:`ScaleByRpropState`.

    Example:
        >>> import torch
        >>> tx = scale_by_accelerated_rprop(lr=0.1)
        >>> tx.update([torch.tensor([2.0, -3.0])], tx.init([torch.zeros(2)]))[0]
        [tensor([-0.1000,  0.1000])]
    """
    name = "scale_by_accelerated_rprop"
    _check(name, lr, etas, step_sizes)
    if tensor_hyperparams(etas, step_sizes):  # the fused op takes numbers
        return scale_by_rprop(lr, etas, step_sizes)

    def update_fn(updates, state, *, params=None, inplace=True):
        del params, inplace
        from diffopt.accelerated_op import fused_update

        treespec, grads, (prevs, sizes) = flatten_updates(name, updates, state.prev, state.step_size)
        present = [i for i, g in enumerate(grads) if g is not None]
        for i in present:
            check_leaf(name, i, grads[i], prevs[i])
        new_updates, new_prevs, new_sizes = [None] * len(grads), list(prevs), list(sizes)
        if present:
            # With zero params the fused update's new params are exactly the update.
            out = fused_update("rprop_update", [torch.zeros_like(grads[i]) for i in present],
                               [grads[i] for i in present], [prevs[i] for i in present],
                               [sizes[i] for i in present], etaminus=float(etas[0]), etaplus=float(etas[1]),
                               step_size_min=float(step_sizes[0]), step_size_max=float(step_sizes[1]))
            for j, i in enumerate(present):
                new_updates[i] = out.params[j]
                new_prevs[i] = out.prevs[j]
                new_sizes[i] = out.step_sizes[j]
        new_state = ScaleByRpropState(prev=unflatten(treespec, new_prevs), step_size=unflatten(treespec, new_sizes))
        return unflatten(treespec, new_updates), new_state

    return GradientTransformation(_init_fn(name, lr), update_fn)
