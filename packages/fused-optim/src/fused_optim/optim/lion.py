"""Drop-in Lion optimizer (Chen et al., 2023) running the fused ``lion_step_`` kernel."""

from __future__ import annotations

from fused_optim import _reference
from fused_optim.optim._common import FusedStep

__all__ = ["Lion"]


class Lion(FusedStep, _reference.Lion):
    r"""Lion ("EvoLved Sign Momentum"; Chen et al., 2023, "Symbolic Discovery of Optimization
    Algorithms") with a fused multi-tensor step (CPU threads / CUDA kernel).

    For each parameter, with :math:`g' = \pm g` and momentum :math:`m` (zeros at first):

    .. math::
        c = \beta_1 m + (1-\beta_1) g',\quad p \leftarrow p - \eta\,(\mathrm{sign}(c) + \lambda p),\quad
        m \leftarrow \beta_2 m + (1-\beta_2) g'

    The update interpolates with :math:`\beta_1` but tracks the momentum with :math:`\beta_2`; the
    weight decay is decoupled (applied as :math:`p(1-\eta\lambda)` before the sign step). Every
    coordinate moves by exactly :math:`\eta`, so the paper advises a learning rate 3-10x smaller
    than AdamW's and a weight decay as much larger. torch.optim has no Lion: the constructor
    checks and the ``state_dict`` layout (``step``, ``exp_avg``) are those a torch.optim class
    would have, shared with the pure-PyTorch :class:`fused_optim._reference.Lion`, whose step
    runs the groups a fused kernel cannot (a learning rate that requires grad).

    Args:
        params, lr, maximize, capturable: shared by every drop-in class; see :mod:`fused_optim.optim`
            (``lr`` defaults to 1e-4).
        betas: :math:`(\beta_1, \beta_2)`, the interpolation of the update and the decay of the
            momentum (default ``(0.9, 0.99)``), each in [0, 1).
        weight_decay: The decoupled weight decay :math:`\lambda` (default 0).

    >>> import torch
    >>> w = torch.nn.Parameter(torch.ones(2))
    >>> opt = Lion([w], lr=0.1)
    >>> w.grad = torch.tensor([0.5, -2.0])
    >>> opt.step()
    >>> w.detach()
    tensor([0.9000, 1.1000])
    """

    _floats = ("lr", "betas", "weight_decay")
    _flags = ("maximize", "capturable")
