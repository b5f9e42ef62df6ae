"""Differentiable Muon: ``diffopt.MetaMuon(module, ...)``, built on :func:`diffopt.muon`."""

from __future__ import annotations

import torch
from torch import nn

from diffopt.alias import muon
from diffopt.optim.meta.base import MetaOptimizer
from diffopt.transform.muon import MUON_NS_COEFFICIENTS

__all__ = ["MetaMuon"]


class MetaMuon(MetaOptimizer):
    """The differentiable Muon meta-optimizer; see :func:`diffopt.muon`.

    ``step(loss)`` replaces the module's matrices by new tensors that depend on the old ones, so
    an outer loss can be differentiated through every step, the Newton-Schulz iteration included
    (in ``ns_dtype``: pass ``None`` for the parameters' own precision).

    Args:
        module: the module whose parameters (all matrices) are replaced, out of place, at every ``step``.
        lr: learning rate (a number, a tensor, or a schedule ``count -> lr``).
        weight_decay: decoupled weight decay factor.
        momentum: the momentum.
        nesterov: orthogonalize the Nesterov blend instead of the momentum.
        ns_coefficients: ``(a, b, c)`` of the Newton-Schulz polynomial.
        eps: the floor of each matrix's norm before the iteration.
        ns_steps: how many Newton-Schulz iterations.
        adjust_lr_fn: ``None``/``'original'`` or ``'match_rms_adamw'``, as torch.optim.Muon.
        moment_requires_grad: create the optimizer state with ``requires_grad=True`` so the
            meta-gradient also flows through it.
        ns_dtype: the iteration's precision (bfloat16 as torch; ``None``: the parameters' dtype).
        use_accelerated_op: compute the momentum and direction with fused-optim's fused op.

    Example:
        >>> import torch
        >>> import diffopt
        >>> net = torch.nn.Linear(2, 2, bias=False)
        >>> w0 = net.weight
        >>> opt = diffopt.MetaMuon(net, lr=0.1, ns_dtype=None)
        >>> opt.step(net.weight.pow(2).sum())
        >>> net.weight.sum().backward()  # the meta-gradient reaches the first weights
        >>> w0.grad.shape
        torch.Size([2, 2])
    """

    def __init__(
        self,
        module: nn.Module,
        lr=1e-3,
        weight_decay=0.1,
        momentum=0.95,
        nesterov=True,
        ns_coefficients=MUON_NS_COEFFICIENTS,
        eps=1e-7,
        ns_steps=5,
        adjust_lr_fn=None,
        *,
        moment_requires_grad=True,
        ns_dtype=torch.bfloat16,
        use_accelerated_op=False,
    ) -> None:
        super().__init__(
            module,
            muon(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov,
                 ns_coefficients=ns_coefficients, eps=eps, ns_steps=ns_steps, adjust_lr_fn=adjust_lr_fn,
                 moment_requires_grad=moment_requires_grad, ns_dtype=ns_dtype,
                 use_accelerated_op=use_accelerated_op),
        )
