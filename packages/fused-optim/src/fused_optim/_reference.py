"""Pure-PyTorch references for every functional op, op by op, differentiable by plain autograd.

They take the same arguments as ``torch.ops.fused_optim.<name>`` and return the same lists. The
tests compare the fused kernels' values and hand-written gradients against them, and the
benchmarks use them as the "op-by-op PyTorch" baseline. Nothing here is fast.

For the optimizers torch.optim lacks (Lion, Adan) it also holds pure-PyTorch optimizer classes
written on torch's ``_foreach`` ops, as torch.optim's default path is: the drop-in classes
``fused_optim.Lion``/``Adan`` derive from them (their constructor checks, defaults and state layout
are these classes'), the tests compare the fused step with them, and the benchmarks use them as
the baseline a user without fused-optim would write.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor
from torch.optim.optimizer import _get_scalar_dtype

Lists = Sequence[Tensor]


def _effective_grad(p: Tensor, g: Tensor, maximize: bool, l2: float) -> Tensor:
    g = -g if maximize else g
    return g + l2 * p if l2 != 0 else g


def _adam_moments(p: Tensor, g: Tensor, m: Tensor, v: Tensor, *, lr: float, beta1: float, beta2: float,
                  weight_decay: float, decoupled_weight_decay: bool, maximize: bool) -> tuple[Tensor, ...]:
    """What Adam, RAdam and NAdam share: the weight decay (an L2 term in the gradient, or decoupled,
    scaling the parameter) and the two moments; returns the new ``(p, g, m, v)``."""
    g = _effective_grad(p, g, maximize, 0.0 if decoupled_weight_decay else weight_decay)
    if decoupled_weight_decay:
        p = p * (1 - lr * weight_decay)
    return p, g, torch.lerp(m, g, 1 - beta1), v * beta2 + (1 - beta2) * g * g


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
        p, g, m, v = _adam_moments(p, g, m, v, lr=lr, beta1=beta1, beta2=beta2, weight_decay=weight_decay,
                                   decoupled_weight_decay=decoupled_weight_decay, maximize=maximize)
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
        p, g, m, v = _adam_moments(p, g, m, v, lr=lr, beta1=beta1, beta2=beta2, weight_decay=weight_decay,
                                   decoupled_weight_decay=decoupled_weight_decay, maximize=maximize)
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
        p, g, m, v = _adam_moments(p, g, m, v, lr=lr, beta1=beta1, beta2=beta2, weight_decay=weight_decay,
                                   decoupled_weight_decay=decoupled_weight_decay, maximize=maximize)
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


def adafactor_update(params: Lists, grads: Lists, row_vars: Lists, col_vars: Lists, variances: Lists, *, step: int,
                     lr: float, beta2_decay: float, eps1: float, eps2: float, d: float, weight_decay: float,
                     maximize: bool, factored: bool) -> tuple[list[Tensor], ...]:
    # torch.optim.Adafactor's step with the two scale factors kept as tensors (so differentiable;
    # clamp sends a tie's gradient to its input, as the fused backward does).
    weight = step**beta2_decay
    rho = min(lr, 1.0 / step**0.5)
    new_params, new_rows, new_cols, new_variances = [], [], [], []
    for i, (p, g) in enumerate(zip(params, grads)):
        g = -g if maximize else g
        root = p.numel() ** 0.5
        alpha = torch.clamp(torch.linalg.vector_norm(p) / root, min=eps2) * rho
        if factored:
            row_mean = torch.linalg.vector_norm(g, dim=-1, keepdim=True).square() / g.size(-1)
            col_mean = torch.linalg.vector_norm(g, dim=-2, keepdim=True).square() / g.size(-2)
            row, col = torch.lerp(row_vars[i], row_mean, weight), torch.lerp(col_vars[i], col_mean, weight)
            estimate = (row @ col) / torch.clamp(row.mean(dim=-2, keepdim=True), min=eps1)
            new_rows.append(row)
            new_cols.append(col)
        else:
            estimate = torch.lerp(variances[i], g * g, weight)
            new_variances.append(estimate)
        u = torch.rsqrt(torch.clamp(estimate, min=eps1 * eps1)) * g
        denom = torch.clamp(torch.linalg.vector_norm(u) / (root * d), min=1.0)
        decayed = p * (1 - lr * weight_decay) if weight_decay != 0 else p
        new_params.append(decayed - (alpha / denom) * u)
    return new_params, new_rows, new_cols, new_variances


def _sign_keep_nan(c: Tensor) -> Tensor:
    """sign(c), but NaN where c is NaN (torch.sign gives 0 there, which would silently freeze
    the parameter): fused-optim's Lion lets a NaN gradient reach the parameter, as torch.optim does."""
    return torch.where(torch.isnan(c), c, torch.sign(c))


def lion_update(params: Lists, grads: Lists, exp_avgs: Lists, *, lr: float, beta1: float, beta2: float,
                weight_decay: float, maximize: bool) -> tuple[list[Tensor], list[Tensor]]:
    new_params, new_m = [], []
    for p, g, m in zip(params, grads, exp_avgs):
        g = -g if maximize else g
        c = m * beta1 + (1 - beta1) * g
        if weight_decay != 0:
            p = p * (1 - lr * weight_decay)
        new_params.append(p - lr * _sign_keep_nan(c))
        new_m.append(m * beta2 + (1 - beta2) * g)
    return new_params, new_m


def muon_direction(grads: Lists, momentum_buffers: Lists, *, momentum: float, nesterov: bool
                   ) -> tuple[list[Tensor], list[Tensor]]:
    directions, new_b = [], []
    for g, b in zip(grads, momentum_buffers):
        b = momentum * b + (1 - momentum) * g
        directions.append((1 - momentum) * g + momentum * b if nesterov else b)
        new_b.append(b)
    return directions, new_b


def adan_update(params: Lists, grads: Lists, exp_avgs: Lists, exp_avg_diffs: Lists, exp_avg_sqs: Lists,
                prev_grads: Lists, *, step: int, lr: float, beta1: float, beta2: float, beta3: float, eps: float,
                weight_decay: float, no_prox: bool, maximize: bool) -> tuple[list[Tensor], ...]:
    out: tuple[list[Tensor], ...] = ([], [], [], [], [])
    bc1, bc2, bc3 = 1 - beta1**step, 1 - beta2**step, 1 - beta3**step
    for p, g, m, v, n, prev in zip(params, grads, exp_avgs, exp_avg_diffs, exp_avg_sqs, prev_grads):
        g = -g if maximize else g
        d = g - prev if step > 1 else torch.zeros_like(g)
        m = m * beta1 + (1 - beta1) * g
        v = v * beta2 + (1 - beta2) * d
        c = g + beta2 * d
        n = n * beta3 + (1 - beta3) * c * c
        u = (m / bc1 + beta2 * v / bc2) / (n.sqrt() / math.sqrt(bc3) + eps)
        if weight_decay != 0 and no_prox:
            p = p * (1 - lr * weight_decay)
        p = p - lr * u
        if weight_decay != 0 and not no_prox:
            p = p / (1 + lr * weight_decay)
        for lst, x in zip(out, (p, m, v, n, g)):
            lst.append(x)
    return out


# --- pure-PyTorch (foreach) optimizers for the algorithms torch.optim lacks ------------------------

def _check_hyper(name: str, lr: Any, betas: Sequence[Any], count: int, **others: float) -> None:
    """torch.optim's constructor checks (and wording), for the hyper-parameters these classes take."""
    if not (isinstance(lr, Tensor) or lr >= 0.0):
        raise ValueError(f"Invalid learning rate: {lr}")
    if not isinstance(betas, Sequence) or len(betas) != count:
        raise ValueError(f"{name}: betas must be a sequence of {count} numbers, got {betas!r}")
    for i, beta in enumerate(betas):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: {beta}")
    for key, value in others.items():
        if not value >= 0.0:
            raise ValueError(f"Invalid {key} value: {value}")


class _ForeachOptimizer(torch.optim.Optimizer):
    """The step skeleton of the classes below: per group, the parameters with a gradient, their
    state (created on first use: the ``_state`` keys, a step counter then zero-initialised buffers,
    which the drop-in classes' step creates alike) as lists, complex tensors viewed as real ones,
    and the algorithm's ``_update`` on those lists."""

    _name: str
    _state: tuple[str, ...]  # "step", then the buffers in the update's argument order

    def _update(self, group: dict[str, Any], lists: list[list[Tensor]], steps: list[float]) -> None:
        raise NotImplementedError

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Performs one optimization step (``closure`` re-evaluates the model and returns the loss)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            buffers = self._state[1:]
            lists: list[list[Tensor]] = [[] for _ in range(1 + len(self._state))]
            counters = []
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError(f"{self._name} does not support sparse gradients")
                state = self.state[p]
                if not state:  # the counter where torch.optim keeps it, capturable or not
                    state["step"] = torch.tensor(0.0, dtype=_get_scalar_dtype(),
                                                 device=p.device if group.get("capturable") else None)
                    for key in buffers:
                        state[key] = torch.zeros_like(p, memory_format=torch.preserve_format)
                row = [p, p.grad, *(state[key] for key in buffers)]
                for lst, t in zip(lists, row):
                    lst.append(torch.view_as_real(t) if t.is_complex() else t)
                counters.append(state["step"])
            if counters:
                torch._foreach_add_(counters, 1.0)
                self._update(group, lists, [float(s.item()) for s in counters])
        return loss


class Lion(_ForeachOptimizer):
    """Lion (Chen et al., 2023) in pure PyTorch on ``_foreach`` ops; see :class:`fused_optim.Lion`."""

    _name = "Lion"
    _state = ("step", "exp_avg")

    def __init__(self, params: Any, lr: float | Tensor = 1e-4, betas: tuple[float, float] = (0.9, 0.99),
                 weight_decay: float = 0.0, *, maximize: bool = False, capturable: bool = False) -> None:
        _check_hyper("Lion", lr, betas, 2, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), weight_decay=weight_decay, maximize=maximize,
                                      capturable=capturable))

    def _update(self, group: dict[str, Any], lists: list[list[Tensor]], steps: list[float]) -> None:
        params, grads, exp_avgs = lists
        lr, wd = float(group["lr"]), group["weight_decay"]
        beta1, beta2 = group["betas"]
        if group["maximize"]:
            grads = list(torch._foreach_neg(grads))
        c = torch._foreach_mul(exp_avgs, beta1)
        torch._foreach_add_(c, torch._foreach_mul(grads, 1 - beta1))
        if wd != 0:
            torch._foreach_mul_(params, 1 - lr * wd)
        direction = torch._foreach_sign(c)
        # NaN where c is NaN (see _sign_keep_nan): min(c, -1) is NaN there and <= -1 elsewhere.
        torch._foreach_maximum_(direction, torch._foreach_minimum(c, -1.0))
        torch._foreach_add_(params, direction, alpha=-lr)
        torch._foreach_mul_(exp_avgs, beta2)
        torch._foreach_add_(exp_avgs, torch._foreach_mul(grads, 1 - beta2))


class Adan(_ForeachOptimizer):
    """Adan (Xie et al., 2022/2024) in pure PyTorch on ``_foreach`` ops; see :class:`fused_optim.Adan`."""

    _name = "Adan"
    _state = ("step", "exp_avg", "exp_avg_diff", "exp_avg_sq", "prev_grad")

    def __init__(self, params: Any, lr: float | Tensor = 1e-3, betas: tuple[float, float, float] = (0.98, 0.92, 0.99),
                 eps: float = 1e-8, weight_decay: float = 0.0, *, no_prox: bool = False,
                 maximize: bool = False, capturable: bool = False) -> None:
        _check_hyper("Adan", lr, betas, 3, epsilon=eps, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      no_prox=no_prox, maximize=maximize, capturable=capturable))

    def _update(self, group: dict[str, Any], lists: list[list[Tensor]], steps: list[float]) -> None:
        params, grads, m, v, n, prev = lists
        lr, wd, eps = float(group["lr"]), group["weight_decay"], group["eps"]
        beta1, beta2, beta3 = group["betas"]
        if group["maximize"]:
            grads = list(torch._foreach_neg(grads))
        for i, step in enumerate(steps):  # no previous gradient yet: a zero difference
            if step == 1:
                prev[i].copy_(grads[i])
        d = torch._foreach_sub(grads, prev)
        torch._foreach_mul_(m, beta1)
        torch._foreach_add_(m, torch._foreach_mul(grads, 1 - beta1))
        torch._foreach_mul_(v, beta2)
        torch._foreach_add_(v, torch._foreach_mul(d, 1 - beta2))
        c = torch._foreach_add(grads, torch._foreach_mul(d, beta2))
        torch._foreach_mul_(n, beta3)
        cc = torch._foreach_mul(c, 1 - beta3)
        torch._foreach_mul_(cc, c)
        torch._foreach_add_(n, cc)
        denom = torch._foreach_sqrt(n)
        torch._foreach_div_(denom, [math.sqrt(1 - beta3**s) for s in steps])
        torch._foreach_add_(denom, eps)
        u = torch._foreach_div(m, [1 - beta1**s for s in steps])
        torch._foreach_add_(u, torch._foreach_div(torch._foreach_mul(v, beta2), [1 - beta2**s for s in steps]))
        torch._foreach_div_(u, denom)
        if wd != 0 and group["no_prox"]:
            torch._foreach_mul_(params, 1 - lr * wd)
        torch._foreach_add_(params, torch._foreach_mul(u, -lr))
        if wd != 0 and not group["no_prox"]:
            torch._foreach_div_(params, 1 + lr * wd)
        torch._foreach_copy_(prev, grads)
