"""Pure-PyTorch references for every functional op, op by op, differentiable by plain autograd.

They take the same arguments as ``torch.ops.fused_optim.<name>`` and return the same lists. The
tests compare the fused kernels' values and hand-written gradients against them, and the
benchmarks use them as the "op-by-op PyTorch" baseline. Nothing here is fast.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = [
    "adadelta_update",
    "adagrad_update",
    "adam_direction",
    "adam_update",
    "adamax_update",
    "asgd_update",
    "nadam_update",
    "radam_update",
    "rmsprop_update",
    "rprop_update",
    "sgd_update",
]

Lists = Sequence[Tensor]


def _effective_grad(p: Tensor, g: Tensor, maximize: bool, l2: float) -> Tensor:
    g = -g if maximize else g
    return g + l2 * p if l2 != 0 else g


def sgd_update(params: Lists, grads: Lists, momentum_buffers: Lists, *, lr: float, momentum: float,
               dampening: float, weight_decay: float, nesterov: bool, maximize: bool,
               first_step: bool) -> tuple[list[Tensor], list[Tensor]]:
    new_params, new_bufs = [], []
    for i, (p, g) in enumerate(zip(params, grads)):
        g = _effective_grad(p, g, maximize, weight_decay)
        if momentum != 0:
            buf = g if first_step else momentum_buffers[i] * momentum + (1 - dampening) * g
            new_bufs.append(buf)
            g = g + momentum * buf if nesterov else buf
        new_params.append(p - lr * g)
    return new_params, new_bufs


def adam_update(params: Lists, grads: Lists, exp_avgs: Lists, exp_avg_sqs: Lists, max_exp_avg_sqs: Lists, *,
                step: int, lr: float, beta1: float, beta2: float, weight_decay: float, eps: float, amsgrad: bool,
                maximize: bool, decoupled_weight_decay: bool) -> tuple[list[Tensor], ...]:
    out: tuple[list[Tensor], ...] = ([], [], [], [])
    bc1, bc2 = 1 - beta1**step, 1 - beta2**step
    for i, (p, g, m, v) in enumerate(zip(params, grads, exp_avgs, exp_avg_sqs)):
        g = _effective_grad(p, g, maximize, 0.0 if decoupled_weight_decay else weight_decay)
        if decoupled_weight_decay:
            p = p * (1 - lr * weight_decay)
        m = torch.lerp(m, g, 1 - beta1)
        v = v * beta2 + (1 - beta2) * g * g
        src = v
        if amsgrad:
            src = torch.maximum(max_exp_avg_sqs[i], v)
            out[3].append(src)
        denom = src.sqrt() / math.sqrt(bc2) + eps
        out[0].append(p - (lr / bc1) * (m / denom))
        out[1].append(m)
        out[2].append(v)
    return out


def adam_direction(grads: Lists, exp_avgs: Lists, exp_avg_sqs: Lists, *, step: int, beta1: float, beta2: float,
                   eps: float, eps_root: float) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
    directions, new_m, new_v = [], [], []
    bc1, bc2 = 1 - beta1**step, 1 - beta2**step
    for g, m, v in zip(grads, exp_avgs, exp_avg_sqs):
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        directions.append((m / bc1) / ((v / bc2 + eps_root).sqrt() + eps))
        new_m.append(m)
        new_v.append(v)
    return directions, new_m, new_v


def rmsprop_update(params: Lists, grads: Lists, square_avgs: Lists, grad_avgs: Lists, momentum_buffers: Lists, *,
                   lr: float, alpha: float, eps: float, weight_decay: float, momentum: float, centered: bool,
                   maximize: bool) -> tuple[list[Tensor], ...]:
    out: tuple[list[Tensor], ...] = ([], [], [], [])
    for i, (p, g, v) in enumerate(zip(params, grads, square_avgs)):
        g = _effective_grad(p, g, maximize, weight_decay)
        v = v * alpha + (1 - alpha) * g * g
        out[1].append(v)
        var = v
        if centered:
            ga = torch.lerp(grad_avgs[i], g, 1 - alpha)
            out[2].append(ga)
            var = v - ga * ga
        avg = var.sqrt() + eps
        if momentum > 0:
            buf = momentum_buffers[i] * momentum + g / avg
            out[3].append(buf)
            out[0].append(p - lr * buf)
        else:
            out[0].append(p - lr * (g / avg))
    return out


def adagrad_update(params: Lists, grads: Lists, state_sums: Lists, *, step: int, lr: float, lr_decay: float,
                   weight_decay: float, eps: float, maximize: bool) -> tuple[list[Tensor], list[Tensor]]:
    new_params, new_sums = [], []
    clr = lr / (1 + (step - 1) * lr_decay)
    for p, g, s in zip(params, grads, state_sums):
        g = _effective_grad(p, g, maximize, weight_decay)
        s = s + g * g
        new_sums.append(s)
        new_params.append(p - clr * (g / (s.sqrt() + eps)))
    return new_params, new_sums


def adadelta_update(params: Lists, grads: Lists, square_avgs: Lists, acc_deltas: Lists, *, lr: float, rho: float,
                    eps: float, weight_decay: float, maximize: bool) -> tuple[list[Tensor], ...]:
    out: tuple[list[Tensor], ...] = ([], [], [])
    for p, g, v, u in zip(params, grads, square_avgs, acc_deltas):
        g = _effective_grad(p, g, maximize, weight_decay)
        v = v * rho + (1 - rho) * g * g
        delta = (u + eps).sqrt() / (v + eps).sqrt() * g
        u = u * rho + (1 - rho) * delta * delta
        out[0].append(p - lr * delta)
        out[1].append(v)
        out[2].append(u)
    return out


def adamax_update(params: Lists, grads: Lists, exp_avgs: Lists, exp_infs: Lists, *, step: int, lr: float,
                  beta1: float, beta2: float, eps: float, weight_decay: float,
                  maximize: bool) -> tuple[list[Tensor], ...]:
    out: tuple[list[Tensor], ...] = ([], [], [])
    clr = lr / (1 - beta1**step)
    for p, g, m, u in zip(params, grads, exp_avgs, exp_infs):
        g = _effective_grad(p, g, maximize, weight_decay)
        m = torch.lerp(m, g, 1 - beta1)
        u = torch.maximum(u * beta2, g.abs() + eps)
        out[0].append(p - clr * (m / u))
        out[1].append(m)
        out[2].append(u)
    return out


def radam_update(params: Lists, grads: Lists, exp_avgs: Lists, exp_avg_sqs: Lists, *, step: int, lr: float,
                 beta1: float, beta2: float, eps: float, weight_decay: float, decoupled_weight_decay: bool,
                 maximize: bool) -> tuple[list[Tensor], ...]:
    out: tuple[list[Tensor], ...] = ([], [], [])
    bc1, bc2 = 1 - beta1**step, 1 - beta2**step
    rho_inf = 2 / (1 - beta2) - 1
    rho_t = rho_inf - 2 * step * beta2**step / bc2
    for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs):
        g = _effective_grad(p, g, maximize, 0.0 if decoupled_weight_decay else weight_decay)
        if decoupled_weight_decay:
            p = p * (1 - lr * weight_decay)
        m = torch.lerp(m, g, 1 - beta1)
        v = v * beta2 + (1 - beta2) * g * g
        m_hat = m / bc1
        if rho_t > 5:
            rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
            out[0].append(p - m_hat * lr * (math.sqrt(bc2) / (v.sqrt() + eps)) * rect)
        else:
            out[0].append(p - m_hat * lr)
        out[1].append(m)
        out[2].append(v)
    return out


def nadam_update(params: Lists, grads: Lists, exp_avgs: Lists, exp_avg_sqs: Lists, *, step: int, mu_product: float,
                 lr: float, beta1: float, beta2: float, eps: float, weight_decay: float, momentum_decay: float,
                 decoupled_weight_decay: bool, maximize: bool) -> tuple[list[Tensor], ...]:
    out: tuple[list[Tensor], ...] = ([], [], [])
    bc2 = 1 - beta2**step
    mu = beta1 * (1.0 - 0.5 * 0.96 ** (step * momentum_decay))
    mu_next = beta1 * (1.0 - 0.5 * 0.96 ** ((step + 1) * momentum_decay))
    grad_coef = -lr * (1.0 - mu) / (1.0 - mu_product)
    avg_coef = -lr * mu_next / (1.0 - mu_product * mu_next)
    for p, g, m, v in zip(params, grads, exp_avgs, exp_avg_sqs):
        g = _effective_grad(p, g, maximize, 0.0 if decoupled_weight_decay else weight_decay)
        if decoupled_weight_decay:
            p = p * (1 - lr * weight_decay)
        m = torch.lerp(m, g, 1 - beta1)
        v = v * beta2 + (1 - beta2) * g * g
        denom = (v / bc2).sqrt() + eps
        out[0].append(p + grad_coef * (g / denom) + avg_coef * (m / denom))
        out[1].append(m)
        out[2].append(v)
    return out


def rprop_update(params: Lists, grads: Lists, prevs: Lists, step_sizes: Lists, *, etaminus: float, etaplus: float,
                 step_size_min: float, step_size_max: float, maximize: bool) -> tuple[list[Tensor], ...]:
    out: tuple[list[Tensor], ...] = ([], [], [])
    for p, g, prev, s in zip(params, grads, prevs, step_sizes):
        g = -g if maximize else g
        prod = (g * prev).detach()  # only its sign matters: piecewise constant
        factor = torch.where(prod > 0, torch.full_like(s, etaplus),
                             torch.where(prod < 0, torch.full_like(s, etaminus), torch.ones_like(s)))
        s = (s * factor).clamp(step_size_min, step_size_max)
        kept = torch.where(prod < 0, torch.zeros_like(g), g)
        out[0].append(p - kept.sign() * s)
        out[1].append(kept)
        out[2].append(s)
    return out


def asgd_update(params: Lists, grads: Lists, axs: Lists, *, eta: float, mu: float, lambd: float,
                weight_decay: float, maximize: bool) -> tuple[list[Tensor], list[Tensor]]:
    new_params, new_axs = [], []
    for p, g, ax in zip(params, grads, axs):
        g = _effective_grad(p, g, maximize, weight_decay)
        p = p * (1 - lambd * eta) - eta * g
        new_params.append(p)
        new_axs.append(p if mu == 1 else ax + (p - ax) * mu)
    return new_params, new_axs
