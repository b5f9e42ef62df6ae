"""Drop-in ``torch.optim.Adafactor`` running the fused ``adafactor_step_`` op."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from fused_optim.optim._common import FusedStep, Slot, StepPlan, scalar

__all__ = ["Adafactor"]


def _factored(group: dict[str, Any], factored: bool) -> bool:  # a Slot.when of the parameter's kind (_kind)
    return factored


def _unfactored(group: dict[str, Any], factored: bool) -> bool:
    return not factored


def _row_var(p: Tensor, grad: Tensor, group: dict[str, Any]) -> Tensor:
    return grad.new_zeros((*grad.shape[:-1], 1))


def _col_var(p: Tensor, grad: Tensor, group: dict[str, Any]) -> Tensor:
    return grad.new_zeros((*grad.shape[:-2], 1, grad.shape[-1]))


def _like_grad(p: Tensor, grad: Tensor, group: dict[str, Any]) -> Tensor:
    return torch.zeros_like(grad, memory_format=torch.preserve_format)


class Adafactor(FusedStep, torch.optim.Adafactor):
    """``torch.optim.Adafactor`` with a fused multi-tensor step.

    Same constructor, state (``step``, then ``row_var`` and ``col_var`` for parameters of two or
    more dimensions, ``variance`` for the others) and ``state_dict()`` as ``torch.optim.Adafactor``.
    One step makes one call for the matrices and one for the vectors of each group: per-tensor
    reductions (the RMS of each parameter and update, the factored statistics) between fused
    element-wise passes.

    Args:
        params, lr, maximize, foreach, capturable: shared by every drop-in class; see
            :mod:`fused_optim.optim`. ``capturable`` is this class's own (torch.optim.Adafactor
            has none): each pass of the step reads the counters and ``found_inf`` on the
            parameters' device, so that a step under ``GradScaler`` never waits for the device and
            a CUDA graph may capture it; a group left capturable=False loads into torch.optim's
            class as saved.
        beta2_decay: The exponent ``c`` of the second-moment decay ``1 - t^c``.
        eps: ``(eps1, eps2)``: the floor of the second moment (``None``: the machine epsilon of
            the group's first parameter with a gradient, as torch takes it) and of the
            parameters' RMS.
        d: The clipping threshold of the update's RMS.
        weight_decay: The decoupled weight decay coefficient.

    >>> w = torch.nn.Parameter(torch.tensor([3.0, 4.0]))
    >>> opt = Adafactor([w], lr=0.5, eps=(None, 0.0))
    >>> w.grad = torch.tensor([1.0, -1.0])
    >>> opt.step()
    >>> w.detach()
    tensor([1.2322, 5.7678])
    """

    _state = ("step", Slot("row_var", _row_var, when=_factored), Slot("col_var", _col_var, when=_factored),
              Slot("variance", _like_grad, when=_unfactored))
    _floats = ("lr", "beta2_decay", "d", "weight_decay")
    _flags = ("maximize", "capturable")
    _variant_flag = "factored"  # matrices and vectors make separate calls

    def __init__(self, params: Any, lr: float | Tensor = 1e-2, beta2_decay: float = -0.8,
                 eps: tuple[float | None, float] = (None, 1e-3), d: float = 1.0, weight_decay: float = 0.0, *,
                 foreach: bool | None = None, maximize: bool = False, capturable: bool = False) -> None:
        super().__init__(params, lr, beta2_decay, eps, d, weight_decay, foreach=foreach, maximize=maximize)
        # torch's constructor has no capturable: the groups made so far get it here, the later ones
        # (add_param_group) from the defaults. Only where it is set, so that a default optimizer's
        # param_groups and state_dict() stay torch.optim.Adafactor's (an absent flag is False).
        if capturable:
            self.defaults["capturable"] = True
            for group in self.param_groups:
                group.setdefault("capturable", True)

    def _kind(self, grad: Tensor) -> bool:
        return grad.dim() > 1  # factored: the second moment kept as row and column averages

    def _variant(self, kind: Any, created: bool) -> bool:
        return bool(kind)

    def _row(self, group: dict[str, Any], p: Tensor, grad: Tensor, plan: StepPlan
             ) -> tuple[bool, list[Tensor | None]]:
        if p.is_complex():
            raise RuntimeError("Adafactor does not support complex parameters")
        return super()._row(group, p, grad, plan)

    def _kwargs(self, group: dict[str, Any], variant: bool) -> dict[str, Any]:
        kwargs = super()._kwargs(group, variant)
        eps1, eps2 = group["eps"]
        if eps1 is None:  # torch takes the dtype of the group's first parameter with a gradient
            first = next(p for p in group["params"] if p.grad is not None)
            eps1 = torch.finfo(first.dtype).eps
        kwargs["eps1"], kwargs["eps2"] = scalar(eps1), scalar(eps2)
        return kwargs
