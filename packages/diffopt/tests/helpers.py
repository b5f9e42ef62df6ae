"""Shared fixtures for diffopt's tests: tiny models, data, finite differences."""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise

import torch
from torch import nn


def small_mlp(seed: int = 0, dtype: torch.dtype = torch.float64, activation: type = nn.Tanh,
              sizes: tuple[int, ...] = (2, 6, 1)) -> nn.Module:
    """A small MLP with a fixed initialization."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for i, (fan_in, fan_out) in enumerate(pairwise(sizes)):
        layers.append(nn.Linear(fan_in, fan_out))
        if i < len(sizes) - 2:
            layers.append(activation())
    return nn.Sequential(*layers).to(dtype)


def regression_task(seed: int = 1, n: int = 8, dtype: torch.dtype = torch.float64,
                    in_dim: int = 2):
    """Support and query sets of a random smooth regression task."""
    generator = torch.Generator().manual_seed(seed)
    x_s = torch.randn(n, in_dim, generator=generator, dtype=dtype)
    x_q = torch.randn(n, in_dim, generator=generator, dtype=dtype)
    w = torch.randn(in_dim, 1, generator=generator, dtype=dtype)
    return x_s, torch.sin(x_s @ w), x_q, torch.sin(x_q @ w)


def central_differences(fn: Callable[[], float], tensors: list[torch.Tensor],
                        h: float = 1e-6) -> list[torch.Tensor]:
    """d fn / d tensors by central differences, perturbing the tensors in place."""
    grads = []
    for t in tensors:
        g = torch.zeros_like(t)
        flat, gflat = t.data.view(-1), g.view(-1)
        for i in range(flat.numel()):
            orig = flat[i].item()
            flat[i] = orig + h
            plus = fn()
            flat[i] = orig - h
            minus = fn()
            flat[i] = orig
            gflat[i] = (plus - minus) / (2 * h)
        grads.append(g)
    return grads
