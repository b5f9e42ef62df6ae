"""Drop-in Adan optimizer (Xie et al., 2022/2024) running the fused ``adan_step_`` kernel."""

from __future__ import annotations

from fused_optim import _reference
from fused_optim.optim._common import FusedStep

__all__ = ["Adan"]


class Adan(FusedStep, _reference.Adan):
    r"""Adan (Xie et al., 2022/2024, "Adan: Adaptive Nesterov Momentum Algorithm") with a fused
    multi-tensor step (CPU threads / CUDA kernel).

    Three moments per parameter: of the gradient (:math:`m`), of the gradient difference
    :math:`d = g' - g_{prev}` (:math:`v`) and of the squared Nesterov-corrected gradient
    :math:`g' + \beta_2 d` (:math:`n`); the betas are decay rates (the paper writes their
    complements), and :math:`b_k = 1 - \beta_k^t` are the bias corrections:

    .. math::
        u = \frac{m/b_1 + \beta_2 v/b_2}{\sqrt{n/b_3} + \epsilon},\quad
        p \leftarrow \frac{p - \eta u}{1 + \eta\lambda}
        \quad(\text{no\_prox: } p \leftarrow p(1 - \eta\lambda) - \eta u)

    On a parameter's first step there is no previous gradient and :math:`d = 0` (the authors'
    PyTorch code does the same; the paper's Algorithm 1 instead starts from an extra gradient
    :math:`g_0`). :math:`\epsilon` is added outside the root, and the moments start at zero with
    bias corrections, also as the authors' code does. Gradient clipping (their ``max_grad_norm``)
    is left to ``torch.nn.utils.clip_grad_norm_``. torch.optim has no Adan: the constructor checks
    and the ``state_dict`` layout (``step``, ``exp_avg``, ``exp_avg_diff``, ``exp_avg_sq``,
    ``prev_grad``) are shared with the pure-PyTorch :class:`fused_optim._reference.Adan`.

    Args:
        params, lr, maximize, capturable: shared by every drop-in class; see :mod:`fused_optim.optim`
            (``lr`` defaults to 1e-3).
        betas: :math:`(\beta_1, \beta_2, \beta_3)`, the decay rates of the three moments (default
            ``(0.98, 0.92, 0.99)``), each in [0, 1).
        eps: Added to the denominator for numerical stability (default 1e-8).
        weight_decay: :math:`\lambda` (default 0), applied as the paper's proximal step.
        no_prox: Decay decoupled, :math:`p(1 - \eta\lambda)` before the step, instead.

    >>> import torch
    >>> w = torch.nn.Parameter(torch.ones(1))
    >>> opt = Adan([w], lr=0.1, eps=0.0)
    >>> w.grad = torch.tensor([3.0])
    >>> opt.step()
    >>> w.detach()
    tensor([0.9000])
    """

    _floats = ("lr", "betas", "eps", "weight_decay")
    _flags = ("no_prox", "maximize", "capturable")
