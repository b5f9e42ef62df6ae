"""Drop-in ``torch.optim.ASGD`` running the fused ``asgd_step_`` kernel."""

from __future__ import annotations

import torch

from fused_optim.optim._common import FusedStep, scalar, scalar_state

__all__ = ["ASGD"]


class ASGD(FusedStep, torch.optim.ASGD):
    """``torch.optim.ASGD`` with a fused multi-tensor step (CPU threads / CUDA kernel).

    Same constructor, state (``step``, ``eta``, ``mu``, ``ax``) and ``state_dict()`` as
    ``torch.optim.ASGD``. The averaged parameters are in each parameter's ``ax`` state.

    Args:
        params, lr, maximize, foreach, differentiable, capturable: shared by every drop-in class;
            see :mod:`fused_optim.optim`.
        lambd: The decay term: the step size is ``lr / (1 + lambd lr t)^alpha``.
        alpha: The power of the step-size decay.
        t0: The step at which averaging starts.
        weight_decay: The L2 penalty coefficient.

    >>> w = torch.nn.Parameter(torch.ones(1))
    >>> opt = ASGD([w], lr=0.1, lambd=0.0)
    >>> w.grad = torch.ones(1)
    >>> opt.step()
    >>> w.detach()
    tensor([0.9000])
    """

    # torch's key order; its ASGD keeps the scalars on the parameter's device
    _state = (scalar_state("step", on_param_device=True),
              scalar_state("eta", lambda group: scalar(group["lr"]), on_param_device=True),
              scalar_state("mu", 1.0, on_param_device=True), "ax")
    _columns = ("ax", "eta", "mu", "step")
    _floats = ("lr", "lambd", "alpha", "t0", "weight_decay")
    _flags = ("maximize", "capturable")
