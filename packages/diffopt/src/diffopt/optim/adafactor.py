"""PyTorch-style Adafactor: ``diffopt.Adafactor(params, ...)``, built on :func:`diffopt.adafactor`."""

from __future__ import annotations

from collections.abc import Iterable

import torch

from diffopt.alias.adafactor import adafactor
from diffopt.optim.base import Optimizer

__all__ = ["Adafactor"]


class Adafactor(Optimizer):
    """The Adafactor optimizer with ``torch.optim``'s interface; see :func:`diffopt.adafactor`.

    Numerically it follows ``torch.optim.Adafactor`` step by step (with ``eps1=None``, each
    parameter's own dtype sets the floor, where torch takes the first parameter's).

    Args:
        params: an iterable of tensors (or of parameter-group dicts) to optimize.
        lr: the learning rate.
        beta2_decay: the exponent of the second-moment decay.
        eps: ``(eps1, eps2)``: the floors of the second moment and of the parameters' RMS.
        d: the clipping threshold of the update's RMS.
        weight_decay: the decoupled weight decay.
        maximize: ascend the objective instead of descending it.
        use_accelerated_op: compute the step with fused-optim's fused op.

    Example:
        >>> import torch
        >>> import diffopt
        >>> w = torch.tensor([1.0, -2.0], requires_grad=True)
        >>> opt = diffopt.Adafactor([w], lr=0.1)
        >>> (w ** 2).sum().backward()
        >>> opt.step()
        >>> w.detach()
        tensor([ 0.8419, -1.8419])
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr=1e-2,
        beta2_decay=-0.8,
        eps=(None, 1e-3),
        d=1.0,
        weight_decay=0.0,
        *,
        maximize=False,
        use_accelerated_op=False,
    ) -> None:
        super().__init__(
            params, adafactor(lr=lr, beta2_decay=beta2_decay, eps=eps, d=d, weight_decay=weight_decay,
                              maximize=maximize, use_accelerated_op=use_accelerated_op)
        )
