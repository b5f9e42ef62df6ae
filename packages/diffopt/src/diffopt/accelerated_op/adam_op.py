"""TorchOpt's ``AdamOp`` calling convention over fused-optim's fused, differentiable Adam.

``AdamOp(b1, b2, eps, eps_root=..., inplace=...)(mu, nu, updates, count)`` advances Adam's
moments and returns the bias-corrected direction for one tensor. Out of place its derivative is
fused-optim's hand-written backward, exact with ``eps`` and ``eps_root`` and finite (the limit,
zero) where a gradient entry and its second moment are both zero, where TorchOpt's op gives
NaN.

Example:
    The first step of Adam is the sign of the gradient, up to ``eps`` and to the rounding of the
    bias corrections and the root, whose last bit differs between machines: hence the rounding.

    >>> import torch
    >>> op = AdamOp(inplace=False)
    >>> mu, nu, direction = op(torch.zeros(2), torch.zeros(2), torch.tensor([0.5, -2.0]), 1)
    >>> torch.round(direction, decimals=4)
    tensor([ 1., -1.])
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import torch

__all__ = ["AdamOp"]


class AdamOp:
    """One Adam step for one tensor: new moments and the update direction (no learning rate).

    With ``g`` the update (gradient) and ``t = count``:
    ``mu' = b1 mu + (1 - b1) g``, ``nu' = b2 nu + (1 - b2) g^2`` and
    ``direction = (mu' / (1 - b1^t)) / (sqrt(nu' / (1 - b2^t) + eps_root) + eps)``.

    Args:
        b1: decay rate of the first moment, in ``[0, 1)``.
        b2: decay rate of the second moment, in ``[0, 1)``.
        eps: added to the root in the denominator, ``>= 0``.
        eps_root: added under the root, ``>= 0``.
        inplace: write the results into the given ``mu``, ``nu`` and ``updates`` and return
            them (not differentiable), instead of returning new, differentiable tensors.

    Example:
        >>> import torch
        >>> op = AdamOp(b1=0.9, b2=0.99, eps=0.0, inplace=False)
        >>> g = torch.tensor([3.0], dtype=torch.float64, requires_grad=True)
        >>> mu, nu, direction = op(torch.zeros(1, dtype=torch.float64),
        ...                        torch.zeros(1, dtype=torch.float64), g, 1)
        >>> round(mu.item(), 6), round(nu.item(), 6), round(direction.item(), 6)
        (0.3, 0.09, 1.0)
        >>> # g / |g| does not change with |g|: a zero derivative, up to rounding
        >>> abs(torch.autograd.grad(direction.sum(), g)[0].item()) < 1e-12
        True
    """

    def __init__(self, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, *,
                 eps_root: float = 0.0, inplace: bool = True) -> None:
        for name, value, upper in (("b1", b1, 1.0), ("b2", b2, 1.0),
                                   ("eps", eps, math.inf), ("eps_root", eps_root, math.inf)):
            if not isinstance(value, numbers.Real) or isinstance(value, bool):
                raise TypeError(f"AdamOp: {name} must be a real number, got {value!r}")
            if not 0.0 <= value < upper:
                raise ValueError(f"AdamOp: {name} must be in [0, {upper}), got {value!r}")
        self.b1 = float(b1)
        self.b2 = float(b2)
        self.eps = float(eps)
        self.eps_root = float(eps_root)
        self.inplace = bool(inplace)

    def __repr__(self) -> str:
        return (f"AdamOp(b1={self.b1}, b2={self.b2}, eps={self.eps}, eps_root={self.eps_root}, "
                f"inplace={self.inplace})")

    def __call__(self, mu: torch.Tensor, nu: torch.Tensor, updates: torch.Tensor | None,
                 count: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Advance the moments by one step and return ``(new_mu, new_nu, direction)``.

        Args:
            mu: the first moment, shaped like ``updates``.
            nu: the second moment, shaped like ``updates``.
            updates: the gradient; ``None`` (no gradient) returns ``(mu, nu, None)`` untouched.
            count: the step number after this step (``1`` for the first), an int or an integer
                tensor with one element.

        Returns:
            ``(new_mu, new_nu, direction)``; with ``inplace=True`` these are ``mu``, ``nu`` and
            ``updates`` themselves, overwritten.

        Example:
            >>> import torch
            >>> mu, nu, g = torch.zeros(1), torch.zeros(1), torch.tensor([2.0])
            >>> out = AdamOp(eps=0.0)(mu, nu, g, 1)
            >>> out[0] is mu and out[2] is g, torch.round(g, decimals=4)  # the sign, up to rounding
            (True, tensor([1.]))
        """
        if updates is None:
            return mu, nu, None
        step = self._step(count)
        for name, tensor in (("mu", mu), ("nu", nu), ("updates", updates)):
            if not isinstance(tensor, torch.Tensor):
                raise TypeError(f"AdamOp: {name} must be a tensor, got {type(tensor).__name__}")
            if tensor.shape != updates.shape:
                raise ValueError(f"AdamOp: {name} has shape {tuple(tensor.shape)}, updates "
                                 f"{tuple(updates.shape)}")
        from diffopt.accelerated_op import adam_direction

        constants = {"beta1": self.b1, "beta2": self.b2, "eps": self.eps,
                     "eps_root": self.eps_root}
        if not self.inplace:
            (direction,), (new_mu,), (new_nu,) = adam_direction([updates], [mu], [nu], step,
                                                                 **constants)
            return new_mu, new_nu, direction
        if torch.is_grad_enabled() and any(t.requires_grad for t in (mu, nu, updates)):
            raise RuntimeError(
                "AdamOp(inplace=True) overwrites its inputs and is not differentiable, but an "
                "input requires grad; use AdamOp(..., inplace=False) or torch.no_grad()"
            )
        with torch.no_grad():
            (direction,), (new_mu,), (new_nu,) = adam_direction([updates], [mu], [nu], step,
                                                                 **constants)
            mu.copy_(new_mu)
            nu.copy_(new_nu)
            updates.copy_(direction)
        return mu, nu, updates

    @staticmethod
    def _step(count: Any) -> int:
        if isinstance(count, torch.Tensor):
            if count.numel() != 1 or count.is_floating_point() or count.is_complex():
                raise TypeError(f"AdamOp: count must be an int or a one-element integer tensor, "
                                f"got {count!r}")
            count = int(count.item())
        if isinstance(count, bool) or not isinstance(count, numbers.Integral):
            raise TypeError(f"AdamOp: count must be an int, got {count!r}")
        if count < 1:
            raise ValueError(f"AdamOp: count is the step number after the step and must be "
                             f">= 1, got {count}")
        return int(count)
