"""Differentiable, out-of-place optimizer updates for meta-learning.

Each ``*_update`` takes lists of params, grads and optimizer state and returns new tensors
(inputs are never modified) with the autograd graph kept: gradients flow to the params, the
grads and every state tensor through one fused backward node per call (``FusedAdamBackward``...),
whose derivative is exact, ``eps`` terms included, and finite wherever the limit exists (a
gradient entry that is exactly zero with zero state gives a zero, not NaN, meta-gradient).

Hyper-parameters are Python numbers; they are not differentiated. Backward of the backward
(second order through the update) raises a clear error.

The update rules are exactly ``torch.optim``'s (see each function); ``step`` is the step count
after this update (1 on the first call).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor

from fused_optim.ops import (
    apply_functional,
    muon_apply_,
    muon_lr_scale,
    newton_schulz,
    shape_batches,
    validate_only,
)
from fused_optim.ops import tensor_list as _tensors

__all__ = [
    "ASGDUpdate",
    "AdafactorUpdate",
    "AdadeltaUpdate",
    "AdagradUpdate",
    "AdamUpdate",
    "AdamaxUpdate",
    "AdanUpdate",
    "LionUpdate",
    "MuonUpdate",
    "NAdamUpdate",
    "RAdamUpdate",
    "RMSpropUpdate",
    "RpropUpdate",
    "SGDUpdate",
    "adadelta_update",
    "adafactor_update",
    "adagrad_update",
    "adam_direction",
    "adam_update",
    "adamax_update",
    "adan_update",
    "adamw_update",
    "lion_update",
    "muon_direction",
    "muon_update",
    "asgd_update",
    "nadam_momentum",
    "nadam_update",
    "radam_update",
    "rmsprop_update",
    "rprop_update",
    "sgd_update",
]


class SGDUpdate(NamedTuple):
    """The result of :func:`sgd_update`: new tensors, one per parameter in each list.

    Attributes:
        params: The updated parameters.
        momentum_buffers: The new momentum buffers; empty when ``momentum == 0``.

    >>> import torch
    >>> out = sgd_update([torch.ones(2)], [torch.ones(2)], lr=0.5)
    >>> out.params, out.momentum_buffers
    ([tensor([0.5000, 0.5000])], [])
    """

    params: list[Tensor]
    momentum_buffers: list[Tensor]  # empty when momentum == 0


class AdamUpdate(NamedTuple):
    """The result of :func:`adam_update` and :func:`adamw_update`.

    Attributes:
        params: The updated parameters.
        exp_avgs, exp_avg_sqs: The new first and second moments.
        max_exp_avg_sqs: The new running maxima of the second moments; empty unless ``amsgrad``.

    >>> import torch
    >>> z = torch.zeros(1)
    >>> out = adam_update([torch.ones(1)], [torch.ones(1)], [z], [z], 1, lr=0.1)
    >>> out.exp_avgs, out.max_exp_avg_sqs
    ([tensor([0.1000])], [])
    """

    params: list[Tensor]
    exp_avgs: list[Tensor]
    exp_avg_sqs: list[Tensor]
    max_exp_avg_sqs: list[Tensor]  # empty unless amsgrad


class RMSpropUpdate(NamedTuple):
    """The result of :func:`rmsprop_update`.

    Attributes:
        params: The updated parameters.
        square_avgs: The new running averages of the squared gradients.
        grad_avgs: The new running averages of the gradients; empty unless ``centered``.
        momentum_buffers: The new momentum buffers; empty unless ``momentum > 0``.

    >>> import torch
    >>> out = rmsprop_update([torch.ones(1)], [torch.ones(1)], [torch.zeros(1)], alpha=0.5)
    >>> out.square_avgs, out.grad_avgs
    ([tensor([0.5000])], [])
    """

    params: list[Tensor]
    square_avgs: list[Tensor]
    grad_avgs: list[Tensor]  # empty unless centered
    momentum_buffers: list[Tensor]  # empty unless momentum > 0


class AdagradUpdate(NamedTuple):
    """The result of :func:`adagrad_update`.

    Attributes:
        params: The updated parameters.
        state_sums: The new sums of squared gradients.

    >>> import torch
    >>> out = adagrad_update([torch.ones(1)], [torch.full((1,), 2.0)], [torch.zeros(1)], step=1)
    >>> out.state_sums
    [tensor([4.])]
    """

    params: list[Tensor]
    state_sums: list[Tensor]


class AdadeltaUpdate(NamedTuple):
    """The result of :func:`adadelta_update`.

    Attributes:
        params: The updated parameters.
        square_avgs: The new running averages of the squared gradients.
        acc_deltas: The new running averages of the squared updates.

    >>> import torch
    >>> z = torch.zeros(1)
    >>> out = adadelta_update([torch.ones(1)], [torch.ones(1)], [z], [z], rho=0.5)
    >>> out.square_avgs
    [tensor([0.5000])]
    """

    params: list[Tensor]
    square_avgs: list[Tensor]
    acc_deltas: list[Tensor]


class AdamaxUpdate(NamedTuple):
    """The result of :func:`adamax_update`.

    Attributes:
        params: The updated parameters.
        exp_avgs: The new first moments.
        exp_infs: The new exponentially weighted infinity norms.

    >>> import torch
    >>> z = torch.zeros(1)
    >>> out = adamax_update([torch.ones(1)], [torch.full((1,), -3.0)], [z], [z], 1)
    >>> out.exp_infs
    [tensor([3.])]
    """

    params: list[Tensor]
    exp_avgs: list[Tensor]
    exp_infs: list[Tensor]


class LionUpdate(NamedTuple):
    """The result of :func:`lion_update`.

    Attributes:
        params: The updated parameters.
        exp_avgs: The new momenta.

    >>> import torch
    >>> out = lion_update([torch.ones(1)], [torch.full((1,), 2.0)], [torch.zeros(1)], lr=0.5)
    >>> out.params, out.exp_avgs
    ([tensor([0.5000])], [tensor([0.0200])])
    """

    params: list[Tensor]
    exp_avgs: list[Tensor]


class MuonUpdate(NamedTuple):
    """The result of :func:`muon_update`.

    Attributes:
        params: The updated parameters.
        momentum_buffers: The new momentum buffers.

    >>> import torch
    >>> out = muon_update([torch.zeros(2, 2)], [torch.eye(2)], [torch.zeros(2, 2)], lr=0.5, momentum=0.5,
    ...                   nesterov=False, ns_steps=0)
    >>> out.momentum_buffers
    [tensor([[0.5000, 0.0000],
            [0.0000, 0.5000]])]
    """

    params: list[Tensor]
    momentum_buffers: list[Tensor]


class AdanUpdate(NamedTuple):
    """The result of :func:`adan_update`.

    Attributes:
        params: The updated parameters.
        exp_avgs: The new first moments of the gradient.
        exp_avg_diffs: The new first moments of the gradient difference.
        exp_avg_sqs: The new second moments of the Nesterov-corrected gradient.
        prev_grads: This step's gradients (after the ``maximize`` sign), the next step's previous ones.

    >>> import torch
    >>> z = torch.zeros(1)
    >>> out = adan_update([torch.ones(1)], [torch.full((1,), 2.0)], [z], [z], [z], [z], 1)
    >>> out.exp_avgs, out.prev_grads
    ([tensor([0.0400])], [tensor([2.])])
    """

    params: list[Tensor]
    exp_avgs: list[Tensor]
    exp_avg_diffs: list[Tensor]
    exp_avg_sqs: list[Tensor]
    prev_grads: list[Tensor]


class RAdamUpdate(NamedTuple):
    """The result of :func:`radam_update`.

    Attributes:
        params: The updated parameters.
        exp_avgs, exp_avg_sqs: The new first and second moments.

    >>> import torch
    >>> z = torch.zeros(1)
    >>> out = radam_update([torch.ones(1)], [torch.ones(1)], [z], [z], 1)
    >>> out.exp_avgs
    [tensor([0.1000])]
    """

    params: list[Tensor]
    exp_avgs: list[Tensor]
    exp_avg_sqs: list[Tensor]


def _number(name: str, value: Any) -> float:
    if type(value) is float or type(value) is int:  # the common case, without ABC checks
        return float(value)
    if isinstance(value, Tensor):
        if value.requires_grad:
            raise TypeError(f"{name} requires grad, but fused_optim does not differentiate hyper-parameters; "
                            "pass a Python number (or a tensor without grad)")
        if value.numel() != 1:
            raise ValueError(f"{name} must be a scalar, got a tensor of shape {tuple(value.shape)}")
        return float(value.item())
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    return float(value)


def _numbers(names: tuple[str, ...], values: tuple[Any, ...]) -> tuple[float, ...]:
    """Several hyper-parameters checked by :func:`_number` in one call (floats pass as they are)."""
    for value in values:
        if type(value) is not float:
            return tuple(map(_number, names, values))
    return values


def _step(step: Any) -> int | torch.SymInt:
    if type(step) is int and step >= 1:
        return step
    if isinstance(step, torch.SymInt) or (torch.compiler.is_compiling() and not isinstance(step, Tensor)):
        # A count traced by torch.compile (symbolic once it varies): the ops take a SymInt, so one
        # graph serves every step (int() would specialize it, one recompile per step); the kernel
        # checks it when the graph runs.
        return step  # type: ignore[no-any-return]
    if isinstance(step, Tensor) and step.numel() == 1 and not step.is_floating_point():
        step = int(step.item())
    elif isinstance(step, Tensor) and step.numel() == 1:
        value = float(step.item())
        if not value.is_integer():
            raise ValueError(f"step must be a whole number, got {value}")
        step = int(value)
    if isinstance(step, bool) or not isinstance(step, numbers.Integral):
        raise TypeError(f"step must be an int (the step count after this update), got {type(step).__name__}")
    if step < 1:
        raise ValueError(f"step must be >= 1 (the step count after this update), got {step}")
    return int(step)


def _betas(betas: Any, count: int = 2) -> tuple[float, ...]:
    """``betas`` as ``count`` floats (a pair; Adan's, a triple)."""
    names = _BETA_NAMES[:count]
    if not (type(betas) is tuple or isinstance(betas, Sequence)) or len(betas) != count:  # a tuple: no ABC check
        raise TypeError(f"betas must be a {'pair' if count == 2 else 'triple'} ({', '.join(names)}), got {betas!r}")
    return _numbers(names, tuple(betas))


_BETA_NAMES = ("beta1", "beta2", "beta3")


def sgd_update(params: Sequence[Tensor], grads: Sequence[Tensor],
               momentum_buffers: Sequence[Tensor] | None = None, *, lr: float = 1e-3, momentum: float = 0.0,
               dampening: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
               maximize: bool = False) -> SGDUpdate:
    r"""One SGD step, out of place, as ``torch.optim.SGD`` computes it.

    .. math::
        g' = \pm g + \lambda p,\quad b' = \mu b + (1-\tau) g' \;(b' = g' \text{ on the first step}),\quad
        p' = p - \eta\,(g' + \mu b' \text{ if nesterov else } b')

    Args:
        params, grads: lists of tensors of matching shapes.
        momentum_buffers: the buffers from the previous step; ``None`` on the first step (the
            buffers then start as the gradient) or when ``momentum == 0``.
        lr, momentum, dampening, weight_decay, nesterov, maximize: as in ``torch.optim.SGD``.

    Returns:
        ``SGDUpdate(params, momentum_buffers)``; ``momentum_buffers`` is empty when ``momentum == 0``.

    >>> import torch
    >>> p = torch.tensor([1.0, 2.0], requires_grad=True)
    >>> new = sgd_update([p], [torch.tensor([0.5, -0.5])], lr=0.1)
    >>> new.params[0]
    tensor([0.9500, 2.0500], grad_fn=<FusedSGDBackward>)
    """
    momentum = _number("momentum", momentum)
    first_step = momentum_buffers is None
    buffers = [] if first_step or momentum == 0 else _tensors("momentum_buffers", momentum_buffers)
    kwargs = {"lr": _number("lr", lr), "momentum": momentum, "dampening": _number("dampening", dampening),
              "weight_decay": _number("weight_decay", weight_decay), "nesterov": bool(nesterov),
              "maximize": bool(maximize), "first_step": first_step}
    return SGDUpdate(*apply_functional("sgd_update", [params, grads, buffers], kwargs))


def _adam(params: Any, grads: Any, exp_avgs: Any, exp_avg_sqs: Any, step: Any, lr: Any, betas: Any, eps: Any,
          weight_decay: Any, amsgrad: bool, maximize: bool, max_exp_avg_sqs: Any, decoupled: bool,
          node: str) -> AdamUpdate:
    beta1, beta2 = _betas(betas)
    if amsgrad:
        if max_exp_avg_sqs is None:
            raise ValueError("amsgrad=True needs max_exp_avg_sqs (zeros on the first step)")
        maxes = _tensors("max_exp_avg_sqs", max_exp_avg_sqs)
    else:
        maxes = []
    lr, weight_decay, eps = _numbers(("lr", "weight_decay", "eps"), (lr, weight_decay, eps))
    kwargs = {"step": _step(step), "lr": lr, "beta1": beta1, "beta2": beta2, "weight_decay": weight_decay,
              "eps": eps, "amsgrad": bool(amsgrad), "maximize": bool(maximize), "decoupled_weight_decay": decoupled}
    lists = [params, grads, exp_avgs, exp_avg_sqs, maxes]
    return AdamUpdate(*apply_functional("adam_update", lists, kwargs, node=node))


def adam_update(params: Sequence[Tensor], grads: Sequence[Tensor], exp_avgs: Sequence[Tensor],
                exp_avg_sqs: Sequence[Tensor], step: int, *, lr: float = 1e-3,
                betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                amsgrad: bool = False, maximize: bool = False,
                max_exp_avg_sqs: Sequence[Tensor] | None = None) -> AdamUpdate:
    r"""One Adam step (Kingma & Ba, 2015), out of place, as ``torch.optim.Adam`` computes it.

    .. math::
        g' = \pm g + \lambda p,\quad m' = \beta_1 m + (1-\beta_1) g',\quad v' = \beta_2 v + (1-\beta_2) g'^2,\\
        p' = p - \frac{\eta}{1-\beta_1^t}\, \frac{m'}{\sqrt{\hat v}/\sqrt{1-\beta_2^t} + \epsilon}
        \quad (\hat v = \max(v_{\max}, v') \text{ with amsgrad, else } v')

    Args:
        params, grads, exp_avgs, exp_avg_sqs: lists of tensors of matching shapes (state starts at zeros).
        step: the step count after this update (1 on the first call).
        lr, betas, eps, weight_decay, amsgrad, maximize: as in ``torch.optim.Adam``.
        max_exp_avg_sqs: running maxima, needed when ``amsgrad``.

    Returns:
        ``AdamUpdate(params, exp_avgs, exp_avg_sqs, max_exp_avg_sqs)``.

    >>> import torch
    >>> p = torch.tensor([1.0, -1.0], requires_grad=True)
    >>> z = torch.zeros(2)
    >>> new = adam_update([p], [torch.tensor([0.1, -0.2])], [z], [z], 1, lr=0.1)
    >>> new.params[0].detach()
    tensor([ 0.9000, -0.9000])
    >>> new.params[0].grad_fn.name()
    'FusedAdamBackward'
    """
    return _adam(params, grads, exp_avgs, exp_avg_sqs, step, lr, betas, eps, weight_decay, amsgrad, maximize,
                 max_exp_avg_sqs, False, "FusedAdam")


def adamw_update(params: Sequence[Tensor], grads: Sequence[Tensor], exp_avgs: Sequence[Tensor],
                 exp_avg_sqs: Sequence[Tensor], step: int, *, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 amsgrad: bool = False, maximize: bool = False,
                 max_exp_avg_sqs: Sequence[Tensor] | None = None) -> AdamUpdate:
    r"""One AdamW step (Loshchilov & Hutter, 2019): :func:`adam_update` with the weight decay
    decoupled, :math:`p \leftarrow p(1-\eta\lambda)` before the Adam step, as ``torch.optim.AdamW``.

    Args:
        params, grads, exp_avgs, exp_avg_sqs: Lists of tensors of matching shapes (the state starts
            at zeros).
        step: The step count after this update (1 on the first call).
        lr, betas, eps, weight_decay, amsgrad, maximize: As in ``torch.optim.AdamW``
            (``weight_decay`` defaults to 1e-2 there too).
        max_exp_avg_sqs: Running maxima, needed when ``amsgrad``.

    >>> import torch
    >>> p = torch.tensor([1.0], requires_grad=True)
    >>> z = torch.zeros(1)
    >>> adamw_update([p], [torch.tensor([0.0])], [z], [z], 1, lr=0.1, weight_decay=0.5).params[0].detach()
    tensor([0.9500])
    """
    return _adam(params, grads, exp_avgs, exp_avg_sqs, step, lr, betas, eps, weight_decay, amsgrad, maximize,
                 max_exp_avg_sqs, True, "FusedAdamW")


def adam_direction(grads: Sequence[Tensor], exp_avgs: Sequence[Tensor], exp_avg_sqs: Sequence[Tensor], step: int,
                   *, beta1: float, beta2: float, eps: float,
                   eps_root: float = 0.0) -> tuple[list[Tensor], list[Tensor], list[Tensor]]:
    r"""Multi-tensor Adam direction (no lr, no weight decay), differentiable w.r.t. all three lists.

    .. math::
        m' = \beta_1 m + (1-\beta_1) g,\quad v' = \beta_2 v + (1-\beta_2) g^2,\quad
        d = \frac{m'/(1-\beta_1^t)}{\sqrt{v'/(1-\beta_2^t) + \epsilon_{root}} + \epsilon}

    The backward is exact, ``eps`` and ``eps_root`` included, and returns the limit (zero)
    where ``g == 0`` and ``v == 0`` make the derivative of the square root a cancelled 0/0.

    Args:
        grads, exp_avgs, exp_avg_sqs: lists of tensors of matching shapes.
        step: the step count after incrementing (>= 1).
        beta1, beta2, eps, eps_root: the Adam constants.

    Returns:
        ``(directions, new_exp_avgs, new_exp_avg_sqs)``, new tensors; the inputs are untouched.

    >>> import torch
    >>> g = torch.tensor([0.0, 2.0], requires_grad=True)
    >>> d, m, v = adam_direction([g], [torch.zeros(2)], [torch.zeros(2)], 1, beta1=0.9, beta2=0.999, eps=1e-8)
    >>> torch.round(d[0].detach(), decimals=4)  # the sign of g on the first step, up to eps and rounding
    tensor([0., 1.])
    """
    beta1, beta2, eps, eps_root = _numbers(("beta1", "beta2", "eps", "eps_root"), (beta1, beta2, eps, eps_root))
    kwargs = {"step": _step(step), "beta1": beta1, "beta2": beta2, "eps": eps, "eps_root": eps_root}
    lists = [grads, exp_avgs, exp_avg_sqs]
    directions, new_m, new_v = apply_functional("adam_direction", lists, kwargs)
    return directions, new_m, new_v


def rmsprop_update(params: Sequence[Tensor], grads: Sequence[Tensor], square_avgs: Sequence[Tensor], *,
                   grad_avgs: Sequence[Tensor] | None = None, momentum_buffers: Sequence[Tensor] | None = None,
                   lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0.0,
                   momentum: float = 0.0, centered: bool = False, maximize: bool = False) -> RMSpropUpdate:
    r"""One RMSprop step, out of place, as ``torch.optim.RMSprop`` computes it.

    .. math::
        v' = \alpha v + (1-\alpha) g'^2,\quad \bar g' = \alpha \bar g + (1-\alpha) g' \text{ (centered)},\quad
        a = \sqrt{v' - \bar g'^2 \text{ or } v'} + \epsilon,\quad
        b' = \mu b + g'/a,\; p' = p - \eta b' \text{ (momentum) else } p' = p - \eta g'/a

    Args:
        params, grads, square_avgs: lists of tensors of matching shapes.
        grad_avgs: needed when ``centered`` (zeros on the first step, as torch initializes them).
        momentum_buffers: needed when ``momentum > 0`` (zeros on the first step, likewise).
        lr, alpha, eps, weight_decay, momentum, centered, maximize: as in ``torch.optim.RMSprop``.

    Returns:
        ``RMSpropUpdate(params, square_avgs, grad_avgs, momentum_buffers)``.

    >>> import torch
    >>> p = torch.tensor([1.0], requires_grad=True)
    >>> rmsprop_update([p], [torch.tensor([1.0])], [torch.zeros(1)], lr=0.01, alpha=0.75, eps=0.0).params[0].detach()
    tensor([0.9800])
    """
    momentum = _number("momentum", momentum)
    ga = _tensors("grad_avgs", grad_avgs) if centered else []
    if centered and grad_avgs is None:
        raise ValueError("centered=True needs grad_avgs (zeros on the first step)")
    if momentum > 0 and momentum_buffers is None:
        raise ValueError("momentum > 0 needs momentum_buffers (zeros on the first step)")
    bufs = _tensors("momentum_buffers", momentum_buffers) if momentum > 0 else []
    kwargs = {"lr": _number("lr", lr), "alpha": _number("alpha", alpha), "eps": _number("eps", eps),
              "weight_decay": _number("weight_decay", weight_decay), "momentum": momentum,
              "centered": bool(centered), "maximize": bool(maximize)}
    lists = [params, grads, square_avgs, ga, bufs]
    return RMSpropUpdate(*apply_functional("rmsprop_update", lists, kwargs))


def adagrad_update(params: Sequence[Tensor], grads: Sequence[Tensor], state_sums: Sequence[Tensor], step: int, *,
                   lr: float = 1e-2, lr_decay: float = 0.0, weight_decay: float = 0.0, eps: float = 1e-10,
                   maximize: bool = False) -> AdagradUpdate:
    r"""One Adagrad step (Duchi et al., 2011), out of place, as ``torch.optim.Adagrad`` computes it.

    .. math::
        s' = s + g'^2,\quad p' = p - \frac{\eta}{1 + (t-1)\,\text{lr\_decay}}\,\frac{g'}{\sqrt{s'} + \epsilon}

    Args:
        params, grads, state_sums: lists of tensors of matching shapes (sums start at
            ``initial_accumulator_value``).
        step: the step count after this update.
        lr, lr_decay, weight_decay, eps, maximize: as in ``torch.optim.Adagrad``.

    Returns:
        ``AdagradUpdate(params, state_sums)``.

    >>> import torch
    >>> p = torch.tensor([1.0], requires_grad=True)
    >>> adagrad_update([p], [torch.tensor([2.0])], [torch.zeros(1)], 1, lr=0.1, eps=0.0).params[0].detach()
    tensor([0.9000])
    """
    kwargs = {"step": _step(step), "lr": _number("lr", lr), "lr_decay": _number("lr_decay", lr_decay),
              "weight_decay": _number("weight_decay", weight_decay), "eps": _number("eps", eps),
              "maximize": bool(maximize)}
    lists = [params, grads, state_sums]
    return AdagradUpdate(*apply_functional("adagrad_update", lists, kwargs))


def adadelta_update(params: Sequence[Tensor], grads: Sequence[Tensor], square_avgs: Sequence[Tensor],
                    acc_deltas: Sequence[Tensor], *, lr: float = 1.0, rho: float = 0.9, eps: float = 1e-6,
                    weight_decay: float = 0.0, maximize: bool = False) -> AdadeltaUpdate:
    r"""One Adadelta step (Zeiler, 2012), out of place, as ``torch.optim.Adadelta`` computes it.

    .. math::
        v' = \rho v + (1-\rho) g'^2,\quad \delta = \frac{\sqrt{u + \epsilon}}{\sqrt{v' + \epsilon}}\, g',\quad
        u' = \rho u + (1-\rho)\delta^2,\quad p' = p - \eta\,\delta

    Args:
        params, grads, square_avgs, acc_deltas: Lists of tensors of matching shapes (the state
            starts at zeros).
        lr, rho, eps, weight_decay, maximize: As in ``torch.optim.Adadelta``.

    Returns:
        ``AdadeltaUpdate(params, square_avgs, acc_deltas)``.

    >>> import torch
    >>> p = torch.tensor([1.0], requires_grad=True)
    >>> z = torch.zeros(1)
    >>> adadelta_update([p], [torch.tensor([1.0])], [z], [z], rho=0.0, eps=1.0).params[0].detach()
    tensor([0.2929])
    """
    kwargs = {"lr": _number("lr", lr), "rho": _number("rho", rho), "eps": _number("eps", eps),
              "weight_decay": _number("weight_decay", weight_decay), "maximize": bool(maximize)}
    lists = [params, grads, square_avgs, acc_deltas]
    return AdadeltaUpdate(*apply_functional("adadelta_update", lists, kwargs))


def adamax_update(params: Sequence[Tensor], grads: Sequence[Tensor], exp_avgs: Sequence[Tensor],
                  exp_infs: Sequence[Tensor], step: int, *, lr: float = 2e-3,
                  betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                  maximize: bool = False) -> AdamaxUpdate:
    r"""One Adamax step (Kingma & Ba, 2015, sec. 7.1), out of place, as ``torch.optim.Adamax``.

    .. math::
        m' = \beta_1 m + (1-\beta_1) g',\quad u' = \max(\beta_2 u, |g'| + \epsilon),\quad
        p' = p - \frac{\eta}{1-\beta_1^t}\,\frac{m'}{u'}

    Args:
        params, grads, exp_avgs, exp_infs: Lists of tensors of matching shapes (the state starts at
            zeros).
        step: The step count after this update (1 on the first call).
        lr, betas, eps, weight_decay, maximize: As in ``torch.optim.Adamax``.

    Returns:
        ``AdamaxUpdate(params, exp_avgs, exp_infs)``.

    >>> import torch
    >>> p = torch.tensor([1.0], requires_grad=True)
    >>> z = torch.zeros(1)
    >>> adamax_update([p], [torch.tensor([4.0])], [z], [z], 1, lr=0.1, eps=0.0).params[0].detach()
    tensor([0.9000])
    """
    beta1, beta2 = _betas(betas)
    kwargs = {"step": _step(step), "lr": _number("lr", lr), "beta1": beta1, "beta2": beta2,
              "eps": _number("eps", eps), "weight_decay": _number("weight_decay", weight_decay),
              "maximize": bool(maximize)}
    lists = [params, grads, exp_avgs, exp_infs]
    return AdamaxUpdate(*apply_functional("adamax_update", lists, kwargs))


def radam_update(params: Sequence[Tensor], grads: Sequence[Tensor], exp_avgs: Sequence[Tensor],
                 exp_avg_sqs: Sequence[Tensor], step: int, *, lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 decoupled_weight_decay: bool = False, maximize: bool = False) -> RAdamUpdate:
    r"""One RAdam step (Liu et al., 2020), out of place, as ``torch.optim.RAdam`` computes it.

    .. math::
        \rho_\infty = \tfrac{2}{1-\beta_2} - 1,\quad \rho_t = \rho_\infty - \tfrac{2t\beta_2^t}{1-\beta_2^t},\quad
        p' = p - \eta\,\hat m\, r_t \tfrac{\sqrt{1-\beta_2^t}}{\sqrt{v'} + \epsilon} \text{ if } \rho_t > 5
        \text{ else } p - \eta\,\hat m

    Args:
        params, grads, exp_avgs, exp_avg_sqs: Lists of tensors of matching shapes (the state starts
            at zeros).
        step: The step count after this update (1 on the first call).
        lr, betas, eps, weight_decay, decoupled_weight_decay, maximize: As in ``torch.optim.RAdam``.

    Returns:
        ``RAdamUpdate(params, exp_avgs, exp_avg_sqs)``.

    >>> import torch
    >>> p = torch.tensor([1.0], requires_grad=True)
    >>> z = torch.zeros(1)
    >>> radam_update([p], [torch.tensor([3.0])], [z], [z], 1, lr=0.1).params[0].detach()
    tensor([0.7000])
    """
    beta1, beta2 = _betas(betas)
    kwargs = {"step": _step(step), "lr": _number("lr", lr), "beta1": beta1, "beta2": beta2,
              "eps": _number("eps", eps), "weight_decay": _number("weight_decay", weight_decay),
              "decoupled_weight_decay": bool(decoupled_weight_decay), "maximize": bool(maximize)}
    lists = [params, grads, exp_avgs, exp_avg_sqs]
    node = "FusedRAdamW" if decoupled_weight_decay and kwargs["weight_decay"] != 0 else "FusedRAdam"
    return RAdamUpdate(*apply_functional("radam_update", lists, kwargs, node=node))


def lion_update(params: Sequence[Tensor], grads: Sequence[Tensor], exp_avgs: Sequence[Tensor], *,
                lr: float = 1e-4, betas: tuple[float, float] = (0.9, 0.99), weight_decay: float = 0.0,
                maximize: bool = False) -> LionUpdate:
    r"""One Lion step (Chen et al., 2023, "Symbolic Discovery of Optimization Algorithms"), out of place.

    .. math::
        c = \beta_1 m + (1-\beta_1) g',\quad p' = p\,(1 - \eta\lambda) - \eta\,\mathrm{sign}(c),\quad
        m' = \beta_2 m + (1-\beta_2) g'

    with :math:`g' = \pm g` (``maximize``) and decoupled weight decay :math:`\lambda`.

    Gradients: ``sign`` has a zero derivative wherever it has one (autograd takes 0 at 0 too), so
    the meta-gradient reaches ``params`` only through the decay (:math:`\partial p'/\partial p =
    1 - \eta\lambda`), and reaches ``grads`` and ``exp_avgs`` only through the new momentum
    :math:`m'` (which the next steps' signs read, again without a derivative). This is exactly what
    autograd gives for the same formula written in PyTorch.

    Args:
        params, grads, exp_avgs: Lists of tensors of matching shapes (the momenta start at zeros).
        lr, betas, weight_decay, maximize: As in :class:`fused_optim.Lion`.

    Returns:
        ``LionUpdate(params, exp_avgs)``.

    >>> import torch
    >>> p = torch.tensor([1.0, 1.0], requires_grad=True)
    >>> lion_update([p], [torch.tensor([3.0, -0.1])], [torch.zeros(2)], lr=0.1).params[0]
    tensor([0.9000, 1.1000], grad_fn=<FusedLionBackward>)
    """
    beta1, beta2 = _betas(betas)
    kwargs = {"lr": _number("lr", lr), "beta1": beta1, "beta2": beta2,
              "weight_decay": _number("weight_decay", weight_decay), "maximize": bool(maximize)}
    lists = [params, grads, exp_avgs]
    return LionUpdate(*apply_functional("lion_update", lists, kwargs))


def adan_update(params: Sequence[Tensor], grads: Sequence[Tensor], exp_avgs: Sequence[Tensor],
                exp_avg_diffs: Sequence[Tensor], exp_avg_sqs: Sequence[Tensor], prev_grads: Sequence[Tensor],
                step: int, *, lr: float = 1e-3, betas: tuple[float, float, float] = (0.98, 0.92, 0.99),
                eps: float = 1e-8, weight_decay: float = 0.0, no_prox: bool = False,
                maximize: bool = False) -> AdanUpdate:
    r"""One Adan step (Xie et al., 2022/2024, "Adan: Adaptive Nesterov Momentum Algorithm"), out of place.

    With the betas as decay rates (the paper writes their complements), :math:`g' = \pm g`,
    :math:`d = g' - g_{prev}` and bias corrections :math:`b_k = 1 - \beta_k^t`:

    .. math::
        m' = \beta_1 m + (1-\beta_1) g',\quad v' = \beta_2 v + (1-\beta_2) d,\quad
        n' = \beta_3 n + (1-\beta_3) (g' + \beta_2 d)^2,

        u = \frac{m'/b_1 + \beta_2 v'/b_2}{\sqrt{n'/b_3} + \epsilon},\quad
        p' = \frac{p - \eta u}{1 + \eta\lambda}
        \quad(\text{no\_prox: } p' = p\,(1 - \eta\lambda) - \eta u)

    Choices where Algorithm 1 of the paper leaves room (those of the authors' PyTorch code):
    the moments start at zero with bias corrections, instead of the paper's :math:`m_0 = g_0`;
    on the first step (``step == 1``) there is no previous gradient and the difference
    :math:`d` is zero (``prev_grads`` is then not read and gets a zero gradient); :math:`\epsilon`
    is added to the bias-corrected root rather than under it. ``prev_grads`` returns this step's
    :math:`g'`. The default decay is the paper's proximal one; ``no_prox=True`` decays decoupled,
    as AdamW. Gradient clipping (the authors' ``max_grad_norm``) is left to the caller.

    Args:
        params, grads, exp_avgs, exp_avg_diffs, exp_avg_sqs, prev_grads: Lists of tensors of
            matching shapes (the state starts at zeros).
        step: The step count after this update (1 on the first call).
        lr, betas, eps, weight_decay, no_prox, maximize: As in :class:`fused_optim.Adan`.

    Returns:
        ``AdanUpdate(params, exp_avgs, exp_avg_diffs, exp_avg_sqs, prev_grads)``.

    >>> import torch
    >>> p = torch.tensor([1.0], requires_grad=True)
    >>> z = torch.zeros(1)
    >>> adan_update([p], [torch.tensor([3.0])], [z], [z], [z], [z], 1, lr=0.1, eps=0.0).params[0].detach()
    tensor([0.9000])
    """
    beta1, beta2, beta3 = _betas(betas, 3)
    kwargs = {"step": _step(step), "lr": _number("lr", lr), "beta1": beta1, "beta2": beta2, "beta3": beta3,
              "eps": _number("eps", eps), "weight_decay": _number("weight_decay", weight_decay),
              "no_prox": bool(no_prox), "maximize": bool(maximize)}
    lists = [params, grads, exp_avgs, exp_avg_diffs, exp_avg_sqs, prev_grads]
    return AdanUpdate(*apply_functional("adan_update", lists, kwargs))


class NAdamUpdate(NamedTuple):
    """The result of :func:`nadam_update`.

    Attributes:
        params: The updated parameters.
        exp_avgs, exp_avg_sqs: The new first and second moments.
        mu_product: The product of the momentum coefficients through this step (a float, or a
            0-d tensor of the given product's dtype).

    >>> import torch
    >>> z = torch.zeros(1)
    >>> out = nadam_update([torch.ones(1)], [torch.ones(1)], [z], [z], 1, 1.0)
    >>> out.exp_avgs, round(out.mu_product, 4)
    ([tensor([0.1000])], 0.4501)
    """

    params: list[Tensor]
    exp_avgs: list[Tensor]
    exp_avg_sqs: list[Tensor]
    mu_product: float | Tensor


def nadam_momentum(step: Any, beta1: float, momentum_decay: float) -> Any:
    r"""NAdam's momentum coefficient at ``step``, :math:`\mu_t = \beta_1(1 - \tfrac12 0.96^{t\psi})`,
    torch.optim.NAdam's schedule.

    The Python side's one copy of the schedule: :func:`nadam_update` and diffopt's NAdam transforms
    use it; the in-place ``nadam_step_`` op computes the same in C++ (csrc/ops/nadam.cpp) for the
    drop-in class.

    Args:
        step: The step count :math:`t` (1 on the first step): a number, or a tensor (then the
            result is a tensor, traceable and differentiable).
        beta1: The first moment's decay rate :math:`\beta_1`.
        momentum_decay: The schedule's decay :math:`\psi` (torch.optim.NAdam's ``momentum_decay``).

    Returns:
        :math:`\mu_t`, a number or a tensor like ``step``.

    >>> round(nadam_momentum(1, 0.9, 4e-3), 6)
    0.450073
    """
    return beta1 * (1.0 - 0.5 * 0.96 ** (step * momentum_decay))


def nadam_update(params: Sequence[Tensor], grads: Sequence[Tensor], exp_avgs: Sequence[Tensor],
                 exp_avg_sqs: Sequence[Tensor], step: int, mu_product: float | Tensor, *, lr: float = 2e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
                 momentum_decay: float = 4e-3, decoupled_weight_decay: bool = False,
                 maximize: bool = False) -> NAdamUpdate:
    r"""One NAdam step (Dozat, 2016), out of place, as ``torch.optim.NAdam`` computes it.

    .. math::
        \mu_t = \beta_1(1 - \tfrac12 0.96^{t\psi}),\quad \Pi_t = \Pi_{t-1}\mu_t,\quad
        d = \sqrt{v'/(1-\beta_2^t)} + \epsilon,\\
        p' = p - \eta\,\frac{1-\mu_t}{1-\Pi_t}\,\frac{g'}{d} - \eta\,\frac{\mu_{t+1}}{1-\Pi_t\mu_{t+1}}\,\frac{m'}{d}

    Args:
        params, grads, exp_avgs, exp_avg_sqs: Lists of tensors of matching shapes (the state starts
            at zeros).
        step: The step count after this update (1 on the first call).
        mu_product: The product of the momentum coefficients before this step (1.0 on the first
            call): a number, or a 0-d tensor as ``torch.optim.NAdam`` keeps it, in whose dtype the
            new product is then rounded, as torch rounds it.
        lr, betas, eps, weight_decay, momentum_decay, decoupled_weight_decay, maximize: As in
            ``torch.optim.NAdam``.

    Returns:
        ``NAdamUpdate(params, exp_avgs, exp_avg_sqs, mu_product)``.

    >>> import torch
    >>> p = torch.tensor([1.0], requires_grad=True)
    >>> z = torch.zeros(1)
    >>> new = nadam_update([p], [torch.tensor([3.0])], [z], [z], 1, 1.0, lr=0.1)
    >>> new.params[0]
    tensor([0.8944], grad_fn=<FusedNAdamBackward>)
    """
    beta1, beta2 = _betas(betas)
    count = _step(step)
    momentum_decay = _number("momentum_decay", momentum_decay)
    mu = nadam_momentum(count, beta1, momentum_decay)  # the op computes this step's own copy
    if isinstance(mu_product, Tensor):
        if mu_product.numel() != 1:
            raise ValueError(f"mu_product must be a scalar, got a tensor of shape {tuple(mu_product.shape)}")
        new_product: float | Tensor = (mu_product.detach() * mu).reshape(mu_product.shape)
        product = float(new_product.item())  # type: ignore[union-attr]
    else:
        new_product = product = _number("mu_product", mu_product) * mu
    kwargs = {"step": count, "mu_product": product, "lr": _number("lr", lr), "beta1": beta1, "beta2": beta2,
              "eps": _number("eps", eps), "weight_decay": _number("weight_decay", weight_decay),
              "momentum_decay": momentum_decay, "decoupled_weight_decay": bool(decoupled_weight_decay),
              "maximize": bool(maximize)}
    lists = [params, grads, exp_avgs, exp_avg_sqs]
    node = "FusedNAdamW" if decoupled_weight_decay and kwargs["weight_decay"] != 0 else "FusedNAdam"
    new_params, new_exp_avgs, new_exp_avg_sqs = apply_functional("nadam_update", lists, kwargs, node=node)
    return NAdamUpdate(new_params, new_exp_avgs, new_exp_avg_sqs, new_product)


class RpropUpdate(NamedTuple):
    """The result of :func:`rprop_update`.

    Attributes:
        params: The updated parameters.
        prevs: The gradients kept for the next step's sign comparison (zero where the sign flipped).
        step_sizes: The new per-element step sizes.

    >>> import torch
    >>> out = rprop_update([torch.ones(1)], [torch.ones(1)], [torch.ones(1)], [torch.full((1,), 0.1)])
    >>> out.step_sizes
    [tensor([0.1200])]
    """

    params: list[Tensor]
    prevs: list[Tensor]
    step_sizes: list[Tensor]


def rprop_update(params: Sequence[Tensor], grads: Sequence[Tensor], prevs: Sequence[Tensor],
                 step_sizes: Sequence[Tensor], *, etaminus: float = 0.5, etaplus: float = 1.2,
                 step_size_min: float = 1e-6, step_size_max: float = 50.0, maximize: bool = False) -> RpropUpdate:
    r"""One Rprop step (Riedmiller & Braun, 1993), out of place, as ``torch.optim.Rprop`` computes it.

    .. math::
        f = \eta_+ \text{ if } g'\,\text{prev} > 0,\ \eta_- \text{ if } < 0,\ 1 \text{ otherwise},\quad
        s' = \mathrm{clamp}(s f, s_{\min}, s_{\max}),\quad
        p' = p - \mathrm{sign}(g'')\,s',\quad \text{prev}' = g''

    where :math:`g''` is :math:`g'` with the entries whose sign flipped set to zero. The step
    depends on the gradient only through signs, so its derivative reaches the params and the step
    sizes (through the clamp) and, through ``prevs'``, the gradient.

    Args:
        params, grads, prevs, step_sizes: Lists of tensors of matching shapes (``prevs`` start at
            zeros, ``step_sizes`` at the learning rate).
        etaminus, etaplus, step_size_min, step_size_max, maximize: As in ``torch.optim.Rprop``
            (``etas`` and ``step_sizes`` split in two).

    Returns:
        ``RpropUpdate(params, prevs, step_sizes)``.

    >>> import torch
    >>> p = torch.tensor([1.0, 1.0], requires_grad=True)
    >>> new = rprop_update([p], [torch.tensor([2.0, -3.0])], [torch.zeros(2)], [torch.full((2,), 0.1)])
    >>> new.params[0]
    tensor([0.9000, 1.1000], grad_fn=<FusedRpropBackward>)
    """
    kwargs = {"etaminus": _number("etaminus", etaminus), "etaplus": _number("etaplus", etaplus),
              "step_size_min": _number("step_size_min", step_size_min),
              "step_size_max": _number("step_size_max", step_size_max), "maximize": bool(maximize)}
    lists = [params, grads, prevs, step_sizes]
    return RpropUpdate(*apply_functional("rprop_update", lists, kwargs))


class ASGDUpdate(NamedTuple):
    """The result of :func:`asgd_update`.

    Attributes:
        params: The updated parameters.
        axs: The new averages of the parameters.

    >>> import torch
    >>> out = asgd_update([torch.ones(1)], [torch.ones(1)], [torch.zeros(1)], 0.1, 0.5, lambd=0.0)
    >>> out.axs
    [tensor([0.4500])]
    """

    params: list[Tensor]
    axs: list[Tensor]


def asgd_update(params: Sequence[Tensor], grads: Sequence[Tensor], axs: Sequence[Tensor], eta: float, mu: float, *,
                lambd: float = 1e-4, weight_decay: float = 0.0, maximize: bool = False) -> ASGDUpdate:
    r"""One ASGD step (Polyak & Juditsky, 1992), out of place, as ``torch.optim.ASGD`` computes it.

    .. math::
        p' = p(1 - \lambda\eta) - \eta g',\quad ax' = p' \text{ if } \mu = 1 \text{ else } ax + \mu(p' - ax)

    ``eta`` and ``mu`` are the step's step size and averaging weight (torch.optim's per-parameter
    ``eta`` and ``mu`` state before the step); torch's schedule sets them for step :math:`t+1` to
    :math:`\eta = lr / (1 + \lambda\,lr\,t)^\alpha` and :math:`\mu = 1/\max(1, t - t_0)`.

    Args:
        params, grads, axs: Lists of tensors of matching shapes (``axs`` start at zeros).
        eta: The step size.
        mu: The averaging weight.
        lambd, weight_decay, maximize: As in ``torch.optim.ASGD``.

    Returns:
        ``ASGDUpdate(params, axs)``.

    >>> import torch
    >>> p = torch.tensor([1.0], requires_grad=True)
    >>> new = asgd_update([p], [torch.tensor([2.0])], [torch.zeros(1)], 0.1, 1.0, lambd=0.0)
    >>> new.params[0]
    tensor([0.8000], grad_fn=<FusedASGDBackward>)
    """
    kwargs = {"eta": _number("eta", eta), "mu": _number("mu", mu), "lambd": _number("lambd", lambd),
              "weight_decay": _number("weight_decay", weight_decay), "maximize": bool(maximize)}
    lists = [params, grads, axs]
    return ASGDUpdate(*apply_functional("asgd_update", lists, kwargs))


class AdafactorUpdate(NamedTuple):
    """The result of :func:`adafactor_update`; each list has ``None`` where its input had.

    Attributes:
        params: The updated parameters.
        row_vars, col_vars: The new row and column averages of matrix-shaped parameters.
        variances: The new full second moments of the other parameters.

    >>> import torch
    >>> out = adafactor_update([torch.ones(2)], [torch.ones(2)], [None], [None], [torch.zeros(2)], 1)
    >>> out.variances, out.row_vars
    ([tensor([1., 1.])], [None])
    """

    params: list[Tensor]
    row_vars: list[Tensor | None]
    col_vars: list[Tensor | None]
    variances: list[Tensor | None]


def _optional_tensors(name: str, value: Any, n: int) -> list[Tensor | None]:
    if isinstance(value, Tensor) or not isinstance(value, Sequence):
        raise TypeError(f"{name} must be a list of tensors and Nones, got {type(value).__name__}")
    if len(value) != n:
        raise ValueError(f"{name} has {len(value)} entries but params has {n}")
    for i, t in enumerate(value):
        if t is not None and not isinstance(t, Tensor):
            raise TypeError(f"{name}[{i}] must be a tensor or None, got {type(t).__name__}")
    return list(value)


def adafactor_update(params: Sequence[Tensor], grads: Sequence[Tensor], row_vars: Sequence[Tensor | None],
                     col_vars: Sequence[Tensor | None], variances: Sequence[Tensor | None], step: int, *,
                     lr: float = 1e-2, beta2_decay: float = -0.8, eps: tuple[float | None, float] = (None, 1e-3),
                     d: float = 1.0, weight_decay: float = 0.0, maximize: bool = False) -> AdafactorUpdate:
    r"""One Adafactor step (Shazeer & Stern, 2018), out of place, as ``torch.optim.Adafactor`` computes it.

    A parameter of two or more dimensions keeps its second moment factored (row and column
    averages of :math:`g^2` over its last two dimensions), the others a full one:

    .. math::
        \hat V = \frac{R' C'}{\max(\bar R', \epsilon_1)} \text{ or } V',\quad
        U = \frac{g'}{\sqrt{\max(\hat V, \epsilon_1^2)}},\quad
        p' = p(1 - \eta\lambda) - \frac{\max(\epsilon_2, \mathrm{RMS}(p))\min(\eta, t^{-1/2})}
        {\max(1, \mathrm{RMS}(U)/d)}\,U

    with :math:`R', C', V'` the state moved towards this step's :math:`g'^2` statistics by
    :math:`t^c` (``beta2_decay`` :math:`c`). The backward is exact through every term, the per-tensor
    RMS factors and the row/column reductions included (at a tie of a ``max`` the gradient goes
    to its first argument's branch as torch's ``clamp`` sends it).

    Args:
        params, grads: Lists of tensors of one dtype and device.
        row_vars, col_vars: torch.optim's factored state: for a parameter of two or more
            dimensions its row averages (the last dimension reduced to 1) and column averages (the
            second-to-last reduced to 1); ``None`` for the other parameters.
        variances: The full second moments of vectors and scalars; ``None`` for the others.
        step: The step count after this update (1 on the first call).
        lr, beta2_decay, eps, d, weight_decay, maximize: As in ``torch.optim.Adafactor`` (``eps1``
            ``None``: the machine epsilon of the params' dtype).

    Returns:
        ``AdafactorUpdate(params, row_vars, col_vars, variances)``.

    >>> import torch
    >>> p = torch.tensor([3.0, 4.0], requires_grad=True)
    >>> new = adafactor_update([p], [torch.tensor([1.0, -1.0])], [None], [None], [torch.zeros(2)], 1,
    ...                        lr=0.5, eps=(None, 0.0))
    >>> new.params[0]
    tensor([1.2322, 5.7678], grad_fn=<FusedAdafactorBackward>)
    """
    params = _tensors("params", params)
    grads = _tensors("grads", grads)
    n = len(params)
    if len(grads) != n:
        raise ValueError(f"grads has {len(grads)} tensors but params has {n}")
    row_vars = _optional_tensors("row_vars", row_vars, n)
    col_vars = _optional_tensors("col_vars", col_vars, n)
    variances = _optional_tensors("variances", variances, n)
    if not isinstance(eps, Sequence) or len(eps) != 2:
        raise TypeError(f"eps must be a pair (eps1 or None, eps2), got {eps!r}")
    eps1 = (torch.finfo(params[0].dtype).eps if n and params[0].is_floating_point() else 0.0) \
        if eps[0] is None else _number("eps1", eps[0])
    kwargs: dict[str, Any] = {"step": _step(step), "lr": _number("lr", lr),
                              "beta2_decay": _number("beta2_decay", beta2_decay), "eps1": eps1,
                              "eps2": _number("eps2", eps[1]), "d": _number("d", d),
                              "weight_decay": _number("weight_decay", weight_decay), "maximize": bool(maximize)}
    # torch.optim's split: matrices (and batches of them) factored, the others not; one call each.
    factored = [i for i, p in enumerate(params) if p.dim() > 1]
    full = [i for i, p in enumerate(params) if p.dim() <= 1]
    for i in factored:
        for name, values in (("row_vars", row_vars), ("col_vars", col_vars)):
            if values[i] is None:
                raise ValueError(f"{name}[{i}] is None but params[{i}] has {params[i].dim()} dimensions "
                                 "(its second moment is factored)")
    for i in full:
        if variances[i] is None:
            raise ValueError(f"variances[{i}] is None but params[{i}] has {params[i].dim()} dimensions "
                             "(its second moment is kept in full)")
    out = AdafactorUpdate(list(params), list(row_vars), list(col_vars), list(variances))
    for indices, is_factored in ((factored, True), (full, False)):
        if not indices:
            continue
        lists: list[list[Any]] = [[params[i] for i in indices], [grads[i] for i in indices],
                                  [row_vars[i] for i in indices] if is_factored else [],
                                  [col_vars[i] for i in indices] if is_factored else [],
                                  [] if is_factored else [variances[i] for i in indices]]
        new = apply_functional("adafactor_update", lists, {**kwargs, "factored": is_factored})
        for j, i in enumerate(indices):
            out.params[i] = new[0][j]
            if is_factored:
                out.row_vars[i], out.col_vars[i] = new[1][j], new[2][j]
            else:
                out.variances[i] = new[3][j]
    return out


# torch.optim.Muon's defaults: Keller Jordan's quintic Newton-Schulz coefficients, iterations, norm floor.
MUON_NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)


def muon_direction(grads: Sequence[Tensor], momentum_buffers: Sequence[Tensor], *, momentum: float = 0.95,
                   nesterov: bool = True) -> tuple[list[Tensor], list[Tensor]]:
    r"""Muon's momentum and the direction it orthogonalizes, out of place, one fused node
    (``FusedMuonDirectionBackward``):

    .. math::
        b' = \mathrm{lerp}(b, g, 1-\mu),\quad d = \mathrm{lerp}(g, b', \mu)\ \text{(nesterov)}
        \text{ or } b'

    Args:
        grads, momentum_buffers: Matrices of matching shapes (the buffers start at zeros).
        momentum, nesterov: As in :class:`fused_optim.Muon`.

    Returns:
        ``(directions, new_momentum_buffers)``.

    >>> import torch
    >>> d, b = muon_direction([torch.tensor([[2.0, -4.0]])], [torch.zeros(1, 2)], momentum=0.5)
    >>> d, b
    ([tensor([[ 1.5000, -3.0000]])], [tensor([[ 1., -2.]])])
    """
    kwargs = {"momentum": _number("momentum", momentum), "nesterov": bool(nesterov)}
    directions, buffers = apply_functional("muon_direction", [grads, momentum_buffers], kwargs)
    return directions, buffers


def muon_update(params: Sequence[Tensor], grads: Sequence[Tensor], momentum_buffers: Sequence[Tensor], *,
                lr: float = 1e-3, weight_decay: float = 0.1, momentum: float = 0.95, nesterov: bool = True,
                ns_coefficients: tuple[float, float, float] = MUON_NS_COEFFICIENTS, eps: float = 1e-7,
                ns_steps: int = 5, adjust_lr_fn: str | None = None,
                ns_dtype: torch.dtype | None = torch.bfloat16) -> MuonUpdate:
    r"""One Muon step (Jordan et al., 2024), out of place, as torch.optim.Muon computes it:

    .. math::
        b' = \mathrm{lerp}(b, g, 1-\mu),\quad d = \mathrm{lerp}(g, b', \mu) \text{ (nesterov) or } b',\quad
        p' = p\,(1-\eta\lambda) - \eta\,s(p)\,\mathrm{NS}_k^{(a,b,c)}(d)

    The direction is one fused node (:func:`muon_direction`); the Newton-Schulz iteration
    (:func:`fused_optim.ops.newton_schulz`) runs once per shape on the stacked directions of that
    shape, and autograd differentiates it; the last step is two scalings (its backward too).

    Args:
        params, grads, momentum_buffers: Matrices of matching shapes (the buffers start at zeros).
        lr, weight_decay, momentum, nesterov, ns_coefficients, eps, ns_steps, adjust_lr_fn: As in
            :class:`fused_optim.Muon`.
        ns_dtype: The precision of the Newton-Schulz iteration: bfloat16 as torch.optim.Muon (the
            default), or ``None`` for the directions' own dtype (exact gradients in float64, for
            meta-learning or ``gradcheck``).

    Returns:
        ``MuonUpdate(params, momentum_buffers)``.

    >>> import torch
    >>> p = torch.eye(2, requires_grad=True)
    >>> out = muon_update([p], [torch.eye(2)], [torch.zeros(2, 2)], lr=0.1, weight_decay=0.0, ns_dtype=None)
    >>> out.params[0].grad_fn.name(), out.momentum_buffers[0]
    ('AddBackward0', tensor([[0.0500, 0.0000],
            [0.0000, 0.0500]]))
    """
    lr, weight_decay = _number("lr", lr), _number("weight_decay", weight_decay)
    with validate_only():  # the apply pass's checks of the hyper-parameters, on no tensors
        muon_apply_([], [], lr=lr, weight_decay=weight_decay, update_scale=1.0)
    params = _tensors("params", params)
    for i, p in enumerate(params):
        if p.dim() != 2:
            raise ValueError(f"muon_update: Muon updates matrices only, but params[{i}] has shape {tuple(p.shape)}")
    directions, buffers = muon_direction(grads, momentum_buffers, momentum=momentum, nesterov=nesterov)
    if len(params) != len(directions):
        raise ValueError(f"muon_update: {len(params)} params but {len(directions)} grads")
    coefficients = tuple(_number("ns_coefficients", c) for c in ns_coefficients)
    updates = [*directions]
    for indices in shape_batches(directions).values():
        batch = torch.stack([directions[i] for i in indices])
        for i, u in zip(indices, newton_schulz(batch, coefficients, ns_steps, _number("eps", eps), dtype=ns_dtype)):
            updates[i] = u
    decay = 1.0 - lr * weight_decay
    new_params = []
    for i, (p, u) in enumerate(zip(params, updates)):
        if p.shape != u.shape:
            raise ValueError(f"muon_update: params[{i}] has shape {tuple(p.shape)} but grads[{i}] has {tuple(u.shape)}")
        new_params.append(torch.add(p * decay, u.to(p.dtype), alpha=-lr * muon_lr_scale(p.shape, adjust_lr_fn)))
    return MuonUpdate(new_params, buffers)
