"""Each drop-in optimizer beside its twin, as the optimizer tests compare them: torch.optim's class,
or for the optimizers torch.optim lacks (Lion, Adan) the pure-PyTorch class in fused_optim._reference.
The parameters (0-d, vector, non-contiguous matrix, 3-d), their gradients and the lock-step run."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest
import torch

import fused_optim
from fused_optim import _reference

STEPS = 21
TOL = {torch.float64: dict(rtol=1e-12, atol=1e-14), torch.float32: dict(rtol=1e-6, atol=1e-6)}
RESEARCH = ["Lion", "Adan"]  # torch.optim lacks them: their twins are fused_optim._reference's


def twin(name: str) -> type[torch.optim.Optimizer]:
    return getattr(_reference if name in RESEARCH else torch.optim, name)


def as_params(configs: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    """``(name, kwargs)`` pairs as pytest parameters with readable ids."""
    return [pytest.param(name, kw, id=f"{name}-" + "-".join(f"{k}={v}" for k, v in kw.items()))
            for name, kw in configs]


def research_configs() -> list[tuple[str, dict[str, Any]]]:
    """Every option combination of Lion and Adan."""
    out = []
    for betas, wd, maximize in itertools.product([(0.9, 0.99), (0.95, 0.98)], [0.0, 0.1], [False, True]):
        out.append(("Lion", dict(lr=0.01, betas=betas, weight_decay=wd, maximize=maximize)))
    for wd, no_prox, maximize in itertools.product([0.0, 0.02], [False, True], [False, True]):
        if wd == 0 and no_prox:
            continue
        out.append(("Adan", dict(lr=0.01, weight_decay=wd, no_prox=no_prox, maximize=maximize)))
    out.append(("Adan", dict(lr=0.02, betas=(0.9, 0.8, 0.999), eps=1e-6)))
    return out


def params(dtype: torch.dtype, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    tensors = [
        torch.randn((), generator=gen, dtype=dtype),            # 0-d
        torch.randn(7, generator=gen, dtype=dtype),
        torch.randn(5, 3, generator=gen, dtype=dtype).t(),      # non-contiguous (transposed)
        torch.randn(2, 3, 4, generator=gen, dtype=dtype),
    ]
    return [t.clone().requires_grad_() if t.is_contiguous() else t.detach().requires_grad_() for t in tensors]


def grads(params: list[torch.Tensor], step: int, seed: int = 100) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed + step)
    return [torch.randn(p.shape, generator=gen, dtype=p.dtype) for p in params]


def run_both(name: str, kwargs: dict[str, Any], dtype: Any, steps: int = STEPS,
             make_params: Callable[[Any], list[torch.Tensor]] = params) -> tuple[Any, Any, list[Any], list[Any]]:
    """``steps`` steps of the twin and of ours from the same parameters and gradients:
    ``(twin, ours, twin's params, our params)``."""
    ref_params = make_params(dtype)
    our_params = [p.detach().clone().requires_grad_() for p in ref_params]
    ref = twin(name)(ref_params, **kwargs)
    ours = getattr(fused_optim, name)(our_params, **kwargs)
    for step in range(steps):
        for a, b, g in zip(ref_params, our_params, grads(ref_params, step)):
            a.grad, b.grad = g.clone(), g.clone()
        ref.step()
        ours.step()
    return ref, ours, ref_params, our_params
