"""Drop-in ``torch.optim.SGD`` running the fused ``sgd_step_`` kernel."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from fused_optim.optim._common import Buckets, real, run_closure, scalar, torch_path_needed

__all__ = ["SGD"]


class SGD(torch.optim.SGD):
    """``torch.optim.SGD`` with a fused multi-tensor step (CPU OpenMP / CUDA kernel).

    Same constructor, defaults, argument checks, param groups, state (``momentum_buffer``) and
    ``state_dict()`` layout as ``torch.optim.SGD``. Sparse gradients, ``differentiable=True`` and
    a learning rate that requires grad run torch's own implementation.

    >>> w = torch.nn.Parameter(torch.ones(2))
    >>> opt = SGD([w], lr=0.5, momentum=0.9)
    >>> w.grad = torch.ones(2)
    >>> opt.step()
    >>> w.detach()
    tensor([0.5000, 0.5000])
    """

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        """Performs one optimization step (``closure`` re-evaluates the model and returns the loss)."""
        if torch_path_needed(self) or any(
            p.grad is not None and p.grad.is_sparse for g in self.param_groups for p in g["params"]
        ):
            return super().step(closure)
        loss = run_closure(closure)
        work = []
        for group in self.param_groups:
            has_momentum = group["momentum"] != 0
            existing, fresh = Buckets(3), Buckets(3)
            for p in group["params"]:
                grad = p.grad
                if grad is None:
                    continue
                if not has_momentum:
                    existing.add(real(p), real(grad), None)
                    continue
                state = self.state[p]
                buf = state.get("momentum_buffer")
                if buf is None:  # torch starts the buffer as a copy of the (decayed) gradient
                    buf = state["momentum_buffer"] = torch.empty_like(grad, memory_format=torch.preserve_format)
                    fresh.add(real(p), real(grad), real(buf))
                else:
                    existing.add(real(p), real(grad), real(buf))
            work.append((group, has_momentum, existing, fresh))
        for group, has_momentum, existing, fresh in work:
            kwargs = {"lr": scalar(group["lr"]), "momentum": scalar(group["momentum"]),
                      "dampening": scalar(group["dampening"]), "weight_decay": scalar(group["weight_decay"]),
                      "nesterov": bool(group["nesterov"]), "maximize": bool(group["maximize"])}
            for buckets, first_step in ((existing, False), (fresh, True)):
                for params, grads, bufs in buckets:
                    torch.ops.fused_optim.sgd_step_.default(
                        params, grads, bufs if has_momentum else [], first_step=first_step, **kwargs)
        return loss
