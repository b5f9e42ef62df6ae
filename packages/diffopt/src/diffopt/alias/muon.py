r"""Muon (Jordan et al., 2024, "Muon: An optimizer for hidden layers in neural networks"; Liu et al.,
2025, "Muon is Scalable for LLM Training", arXiv:2502.16982).

.. math::
    b_t = \mathrm{lerp}(b_{t-1}, g_t, 1-\mu), \quad
    \theta_t = \theta_{t-1}(1 - \eta\lambda) - \eta\,s(\theta)\,
    \mathrm{NS}^{(a,b,c)}_k\big(\mathrm{lerp}(g_t, b_t, \mu)\big)

as ``torch.optim.Muon`` (without Nesterov, :math:`\mathrm{NS}(b_t)`): for matrices only. The
Newton-Schulz iteration runs in bfloat16 as torch's does, or in the parameters' precision with
``ns_dtype=None`` (exact meta-gradients).
"""

from __future__ import annotations

import torch

from diffopt.alias._utils import check_lr, check_weight_decay, scale_by_neg_lr
from diffopt.base import GradientTransformation
from diffopt.combine import chain
from diffopt.transform import add_decayed_weights, scale_by_accelerated_muon, scale_by_muon
from diffopt.transform.muon import MUON_NS_COEFFICIENTS

__all__ = ["muon"]


def muon(
    lr=1e-3,
    weight_decay: float = 0.1,
    momentum: float = 0.95,
    nesterov: bool = True,
    ns_coefficients: tuple[float, float, float] = MUON_NS_COEFFICIENTS,
    eps: float = 1e-7,
    ns_steps: int = 5,
    adjust_lr_fn: str | None = None,
    *,
    mask=None,
    moment_requires_grad: bool = False,
    ns_dtype: torch.dtype | None = torch.bfloat16,
    use_accelerated_op: bool = False,
) -> GradientTransformation:
    """The functional Muon optimizer (torch.optim.Muon's arguments and defaults).

    Args:
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        weight_decay: decoupled weight decay factor.
        momentum: the momentum :math:`\\mu`.
        nesterov: orthogonalize the Nesterov blend ``lerp(g, b, mu)`` instead of the momentum.
        ns_coefficients: ``(a, b, c)`` of the Newton-Schulz polynomial.
        eps: the floor of each matrix's norm before the iteration.
        ns_steps: how many Newton-Schulz iterations.
        adjust_lr_fn: ``None``/``'original'`` or ``'match_rms_adamw'``, as torch.optim.Muon.
        mask: pytree of booleans (or a function of the params returning one) selecting which
            parameters are decayed.
        moment_requires_grad: create the momentum with ``requires_grad=True``.
        ns_dtype: the iteration's precision (bfloat16 as torch; ``None``: the parameters' dtype).
        use_accelerated_op: compute the momentum and direction with fused-optim's fused op.

    Returns:
        A :class:`~diffopt.base.GradientTransformation`.

    Example:
        >>> import torch
        >>> tx = muon(lr=0.1, weight_decay=0.0, momentum=0.0, ns_dtype=None)
        >>> params = [torch.zeros(2, 2)]
        >>> u = tx.update([torch.eye(2)], tx.init(params), params=params)[0][0]
        >>> bool((u.diagonal() < 0).all()), bool((u - torch.diag(u.diagonal()) == 0).all())
        (True, True)
    """
    check_lr("muon", lr)
    check_weight_decay("muon", weight_decay)
    scaler = scale_by_accelerated_muon if use_accelerated_op else scale_by_muon
    return chain(
        scaler(momentum=momentum, nesterov=nesterov, ns_coefficients=ns_coefficients, eps=eps, ns_steps=ns_steps,
               adjust_lr_fn=adjust_lr_fn, ns_dtype=ns_dtype, moment_requires_grad=moment_requires_grad),
        add_decayed_weights(weight_decay, mask),
        scale_by_neg_lr(lr),
    )
