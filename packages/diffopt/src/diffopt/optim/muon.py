"""PyTorch-style Muon: ``diffopt.Muon(params, ...)``, built on :func:`diffopt.muon`."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from diffopt.alias import muon
from diffopt.optim.base import Optimizer
from diffopt.transform.muon import MUON_NS_COEFFICIENTS

__all__ = ["Muon"]


class Muon(Optimizer):
    """The Muon optimizer with ``torch.optim``'s interface; see :func:`diffopt.muon`.

    Numerically it follows ``torch.optim.Muon`` step by step (matrices only).

    Args:
        params: an iterable of matrices (or of parameter-group dicts) to optimize.
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        weight_decay: decoupled weight decay factor.
        momentum: the momentum.
        nesterov: orthogonalize the Nesterov blend instead of the momentum.
        ns_coefficients: ``(a, b, c)`` of the Newton-Schulz polynomial.
        eps: the floor of each matrix's norm before the iteration.
        ns_steps: how many Newton-Schulz iterations.
        adjust_lr_fn: ``None``/``'original'`` or ``'match_rms_adamw'``, as torch.optim.Muon.
        ns_dtype: the iteration's precision (bfloat16 as torch; ``None``: the parameters' dtype).
        use_accelerated_op: compute the momentum and direction with fused-optim's fused op.

    Example:
        >>> import torch
        >>> import diffopt
        >>> w = torch.eye(2, requires_grad=True)
        >>> opt = diffopt.Muon([w], lr=0.1, weight_decay=0.0)
        >>> (w ** 2).sum().backward()
        >>> opt.step()
        >>> bool((w.detach().diagonal() < 1).all())
        True
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr=1e-3,
        weight_decay=0.1,
        momentum=0.95,
        nesterov=True,
        ns_coefficients=MUON_NS_COEFFICIENTS,
        eps=1e-7,
        ns_steps=5,
        adjust_lr_fn=None,
        *,
        ns_dtype=torch.bfloat16,
        use_accelerated_op=False,
    ) -> None:
        super().__init__(
            params,
            muon(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov,
                 ns_coefficients=ns_coefficients, eps=eps, ns_steps=ns_steps, adjust_lr_fn=adjust_lr_fn,
                 ns_dtype=ns_dtype, use_accelerated_op=use_accelerated_op),
        )
