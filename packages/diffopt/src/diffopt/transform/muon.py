r"""Muon's direction (Jordan et al., 2024, "Muon: An optimizer for hidden layers in neural
networks"; Liu et al., 2025, arXiv:2502.16982): the orthogonalized momentum of each matrix.

.. math::
    b_t = \mathrm{lerp}(b_{t-1}, g_t, 1-\mu), \quad
    d_t = s(g_t)\,\mathrm{NS}^{(a,b,c)}_k\big(\mathrm{lerp}(g_t, b_t, \mu)\big)
    \ \text{(Nesterov; } \mathrm{NS}(b_t) \text{ otherwise)}

with ``NS`` the Newton-Schulz iteration (fused-optim's ``newton_schulz``, one batched chain per
shape) and :math:`s` torch.optim.Muon's shape-dependent learning-rate adjustment. Every piece is
differentiable: the meta-gradient flows through the iteration (in its precision ``ns_dtype``).

Example:
    >>> import torch
    >>> tx = scale_by_muon(momentum=0.0, ns_dtype=None)
    >>> d, _ = tx.update([torch.eye(2)], tx.init([torch.zeros(2, 2)]))
    >>> d[0].shape
    torch.Size([2, 2])
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from diffopt.base import GradientTransformation
from diffopt.transform._leafwise import check_leaf, flatten_updates, unflatten, zeros_like_params

__all__ = ["MUON_NS_COEFFICIENTS", "ScaleByMuonState", "scale_by_accelerated_muon", "scale_by_muon"]

# torch.optim.Muon's quintic Newton-Schulz coefficients (a, b, c).
MUON_NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


class ScaleByMuonState(NamedTuple):
    """State of :func:`scale_by_muon`: the momentum.

    Attributes:
        mu: the momentum buffers (torch.optim.Muon's ``momentum_buffer``), shaped like the parameters.

    Example:
        >>> import torch
        >>> scale_by_muon().init([torch.zeros(2, 3)]).mu[0].shape
        torch.Size([2, 3])
    """

    mu: object


def _init_fn(name: str, moment_requires_grad: bool):
    def init_fn(params):
        return ScaleByMuonState(mu=zeros_like_params(name, params, requires_grad=moment_requires_grad))

    return init_fn


def _make(name: str, momentum: float, nesterov: bool, ns_coefficients: tuple[float, float, float], eps: float,
          ns_steps: int, adjust_lr_fn: str | None, ns_dtype: torch.dtype | None, moment_requires_grad: bool,
          accelerated: bool) -> GradientTransformation:
    from diffopt.accelerated_op import muon_direction, muon_lr_scale, newton_schulz, shape_batches

    if not momentum >= 0.0:
        raise ValueError(f"{name}: momentum must be >= 0, got {momentum}")
    muon_lr_scale((1, 1), adjust_lr_fn)  # rejects an unknown adjust_lr_fn now
    coefficients = tuple(ns_coefficients)
    newton_schulz(torch.zeros(0, 1, 1), coefficients, ns_steps, eps)  # checks them now

    def update_fn(updates, state, *, params=None, inplace=True):
        del params, inplace
        treespec, grads, (mus,) = flatten_updates(name, updates, state.mu)
        present = [i for i, g in enumerate(grads) if g is not None]
        for i in present:
            check_leaf(name, i, grads[i], mus[i])
            if grads[i].dim() != 2:
                raise ValueError(f"{name}: Muon updates matrices only, but leaf {i} has shape {tuple(grads[i].shape)}")
        new_updates, new_mus = [None] * len(grads), list(mus)
        if not present:
            return unflatten(treespec, new_updates), state
        gs, ms = [grads[i] for i in present], [mus[i] for i in present]
        if accelerated:
            directions, out_mus = muon_direction(gs, ms, momentum=momentum, nesterov=nesterov)
        else:
            out_mus = [torch.lerp(m, g, 1 - momentum) for g, m in zip(gs, ms)]
            directions = [torch.lerp(g, m, momentum) if nesterov else m for g, m in zip(gs, out_mus)]
        for shape, indices in shape_batches(directions).items():
            batch = torch.stack([directions[j] for j in indices])
            orthogonal = newton_schulz(batch, coefficients, ns_steps, eps, dtype=ns_dtype)
            scale = muon_lr_scale(shape, adjust_lr_fn)
            for j, o in zip(indices, orthogonal):
                new_updates[present[j]] = o.to(directions[j].dtype) * scale
        for j, i in enumerate(present):
            new_mus[i] = out_mus[j]
        return unflatten(treespec, new_updates), ScaleByMuonState(mu=unflatten(treespec, new_mus))

    return GradientTransformation(_init_fn(name, moment_requires_grad), update_fn)


def scale_by_muon(momentum: float = 0.95, nesterov: bool = True,
                  ns_coefficients: tuple[float, float, float] = MUON_NS_COEFFICIENTS, eps: float = 1e-7,
                  ns_steps: int = 5, adjust_lr_fn: str | None = None, ns_dtype: torch.dtype | None = torch.bfloat16,
                  moment_requires_grad: bool = False) -> GradientTransformation:
    """Replace each matrix's update by Muon's orthogonalized, shape-scaled momentum.

    Args:
        momentum: the momentum :math:`\\mu` (>= 0).
        nesterov: orthogonalize ``lerp(g, b, mu)`` instead of the momentum ``b`` itself.
        ns_coefficients: ``(a, b, c)`` of the Newton-Schulz polynomial.
        eps: the floor of each matrix's norm before the iteration.
        ns_steps: how many Newton-Schulz iterations, in [0, 100).
        adjust_lr_fn: ``None``/``'original'`` (:math:`s = \\sqrt{\\max(1, A/B)}`) or
            ``'match_rms_adamw'`` (:math:`s = 0.2\\sqrt{\\max(A, B)}`), as torch.optim.Muon.
        ns_dtype: the iteration's precision: bfloat16 as torch.optim.Muon, or ``None`` for the
            gradients' own dtype.
        moment_requires_grad: create the momentum with ``requires_grad=True``.

    Returns:
        A :class:`~diffopt.base.GradientTransformation` with :class:`ScaleByMuonState`.

    Example:
        >>> import torch
        >>> tx = scale_by_muon(ns_dtype=None)
        >>> _, state = tx.update([torch.ones(2, 2)], tx.init([torch.zeros(2, 2)]))
        >>> state.mu[0]
        tensor([[0.0500, 0.0500],
                [0.0500, 0.0500]])
    """
    return _make("scale_by_muon", momentum, nesterov, ns_coefficients, eps, ns_steps, adjust_lr_fn, ns_dtype,
                 moment_requires_grad, accelerated=False)


def scale_by_accelerated_muon(momentum: float = 0.95, nesterov: bool = True,
                              ns_coefficients: tuple[float, float, float] = MUON_NS_COEFFICIENTS, eps: float = 1e-7,
                              ns_steps: int = 5, adjust_lr_fn: str | None = None,
                              ns_dtype: torch.dtype | None = torch.bfloat16,
                              moment_requires_grad: bool = False) -> GradientTransformation:
    """:func:`scale_by_muon` with the momentum and direction by fused-optim's fused, differentiable
    ``muon_direction`` (one op per dtype and device, with its hand-written backward).

    Same arguments, state and results as :func:`scale_by_muon`.

    Args:
        momentum, nesterov, ns_coefficients, eps, ns_steps, adjust_lr_fn, ns_dtype, moment_requires_grad:
            As in :func:`scale_by_muon`.

    Returns:
        A :class:`~diffopt.base.GradientTransformation` with :class:`ScaleByMuonState`.

    Example:
        >>> import torch
        >>> tx = scale_by_accelerated_muon(ns_dtype=None)
        >>> _, state = tx.update([torch.ones(2, 2)], tx.init([torch.zeros(2, 2)]))
        >>> state.mu[0]
        tensor([[0.0500, 0.0500],
                [0.0500, 0.0500]])
    """
    return _make("scale_by_accelerated_muon", momentum, nesterov, ns_coefficients, eps, ns_steps, adjust_lr_fn,
                 ns_dtype, moment_requires_grad, accelerated=True)
