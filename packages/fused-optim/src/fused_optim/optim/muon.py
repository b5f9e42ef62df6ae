"""Drop-in ``torch.optim.Muon``: fused element-wise passes around a Newton-Schulz orthogonalization
batched over the matrices of each shape (``fused_optim.ops.muon_step_``)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from fused_optim.optim._common import FusedStep, StepPlan, scalar

__all__ = ["Muon"]


class Muon(FusedStep, torch.optim.Muon):
    r"""``torch.optim.Muon`` (Jordan et al., 2024; Liu et al., 2025, "Muon is Scalable for LLM
    Training") with fused element-wise passes and a batched orthogonalization.

    For each matrix parameter :math:`p` with gradient :math:`g` and momentum buffer :math:`b`
    (zeros at first):

    .. math::
        b \leftarrow \mathrm{lerp}(b, g, 1-\mu),\quad
        d = \begin{cases}\mathrm{lerp}(g, b, \mu) & \text{nesterov}\\ b & \text{otherwise}\end{cases},\quad
        p \leftarrow p\,(1-\eta\lambda) - \eta\,s(p)\,\mathrm{NS}_k^{(a,b,c)}(d)

    where :math:`\mathrm{NS}` is ``ns_steps`` Newton-Schulz iterations in bfloat16
    (:func:`fused_optim.ops.newton_schulz`) and :math:`s(p)` the shape's learning-rate adjustment
    (:func:`fused_optim.ops.muon_lr_scale`). Same constructor, defaults, state
    (``momentum_buffer``) and ``state_dict()`` as ``torch.optim.Muon``. A step makes one fused pass
    for the momentum and the direction of all matrices of a group (per device and dtype), one
    batched matrix-product chain per shape where torch runs one per matrix, and one fused pass of
    decay and update per shape. Muon updates matrices only: a parameter of another dimension is
    rejected (``ValueError``) when the optimizer is built, as torch rejects it.

    Args:
        params, lr: shared by every drop-in class; see :mod:`fused_optim.optim`
            (``lr`` defaults to 1e-3).
        weight_decay: The decoupled weight decay :math:`\lambda` (default 0.1).
        momentum: :math:`\mu` (default 0.95).
        nesterov: Whether the direction blends the gradient with the new momentum (default True).
        ns_coefficients: :math:`(a, b, c)` of the Newton-Schulz polynomial
            (default ``(3.4445, -4.7750, 2.0315)``).
        eps: The floor of each matrix's norm before the iteration (default 1e-7).
        ns_steps: How many Newton-Schulz iterations (default 5).
        adjust_lr_fn: ``None`` or ``"original"`` (:math:`s = \sqrt{\max(1, A/B)}` for an
            :math:`A \times B` matrix), or ``"match_rms_adamw"`` (:math:`s = 0.2\sqrt{\max(A, B)}`).

    >>> w = torch.nn.Parameter(torch.eye(2))
    >>> opt = Muon([w], lr=0.1, weight_decay=0.0)
    >>> w.grad = torch.eye(2)
    >>> opt.step()
    >>> sorted(opt.state[w])
    ['momentum_buffer']
    >>> bool((w.diagonal() < 1).all()), bool((w - torch.diag(w.diagonal()) == 0).all())
    (True, True)
    """

    _op = "muon_step_"
    _state = ("momentum_buffer",)
    _floats = ("lr", "weight_decay", "momentum", "eps")
    _flags = ("nesterov",)
    # torch.optim.Muon takes no GradScaler arguments, nor do these passes: GradScaler unscales the
    # gradients and reads the inf flag itself, as for torch's Muon.
    _step_supports_amp_scaling = False

    def __init__(self, params: Any, *args: Any, **kwargs: Any) -> None:
        params = list(params)  # (checked here, before torch's own check, which would name them its way)
        for item in params:
            for p in item["params"] if isinstance(item, dict) else [item]:
                if isinstance(p, Tensor) and p.dim() != 2:
                    raise ValueError(f"Muon updates matrices only (2 dimensions), but a parameter has shape "
                                     f"{tuple(p.shape)}; optimize the others with another optimizer (AdamW)")
        super().__init__(params, *args, **kwargs)

    def _row(self, group: dict[str, Any], p: Tensor, grad: Tensor, plan: StepPlan
             ) -> tuple[bool, list[Tensor | None]]:
        if p.is_complex():
            raise RuntimeError("Muon: complex parameters are not supported")
        return super()._row(group, p, grad, plan)

    def _kwargs(self, group: dict[str, Any], variant: bool) -> dict[str, Any]:
        kwargs = super()._kwargs(group, variant)
        kwargs["ns_coefficients"] = tuple(map(scalar, group["ns_coefficients"]))
        kwargs["ns_steps"] = int(group["ns_steps"])
        kwargs["adjust_lr_fn"] = group["adjust_lr_fn"]
        return kwargs
