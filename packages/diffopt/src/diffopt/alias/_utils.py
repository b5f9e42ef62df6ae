"""Pieces shared by the aliases: sign flip plus L2 weight decay, and scaling by ``-lr``."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from diffopt.base import EmptyState, GradientTransformation, identity
from diffopt.transform import scale, scale_by_schedule
from diffopt.transform._leafwise import flatten_updates, unflatten

__all__ = [
    "check_lr",
    "check_weight_decay",
    "flip_sign_and_add_weight_decay",
    "reuse_for_numbers",
    "scale_by_neg_lr",
]

_Alias = TypeVar("_Alias", bound=Callable[..., GradientTransformation])
_PLAIN = (int, float, bool, type(None))


def _plain(value: Any) -> bool:
    kind = type(value)
    return kind in _PLAIN or (kind is tuple and all(type(v) in _PLAIN for v in value))


def reuse_for_numbers(alias: _Alias) -> _Alias:
    """Build an alias's transformation once per set of plain-number arguments.

    A transformation is an immutable pair of pure functions, so two calls with the same numbers
    can share one: MAML loops build their inner optimizer per task (``sgd(lr)`` or ``MetaSGD``),
    and building a chain costs more there than the update it makes. Calls with a tensor or a
    schedule (or anything but numbers, bools, ``None`` and tuples of them) build afresh, and
    arguments the alias rejects raise every time.
    """
    build = functools.lru_cache(maxsize=64, typed=True)(alias)

    @functools.wraps(alias)
    def reuse(*args, **kwargs):
        # A loop, not all(genexpr): this runs once per task of a MAML loop.
        for value in (*args, *kwargs.values()):
            if type(value) not in _PLAIN and not _plain(value):
                return alias(*args, **kwargs)
        return build(*args, **kwargs)

    return reuse  # type: ignore[return-value]


def check_lr(name: str, lr: Any) -> None:
    """Raise a ValueError for a negative or non-finite learning rate."""
    if callable(lr) or isinstance(lr, torch.Tensor):
        return
    if not (lr >= 0.0):
        raise ValueError(f"{name}: invalid learning rate {lr}; it must be >= 0")


def check_weight_decay(name: str | None, weight_decay: float) -> None:
    """Raise a ValueError for a negative or NaN weight decay, naming the alias ``name`` if given."""
    if not weight_decay >= 0.0:
        prefix = f"{name}: " if name else ""
        raise ValueError(f"{prefix}invalid weight_decay {weight_decay}; it must be >= 0")


def flip_sign_and_add_weight_decay(weight_decay: float = 0.0,
                                   maximize: bool = False) -> GradientTransformation:
    """``g -> (-g if maximize else g) + weight_decay * params`` (torch.optim's L2 convention).

    Args:
        weight_decay: the L2 coefficient (>= 0); with 0 no params are needed.
        maximize: flip the sign of the updates (gradient ascent).

    Returns:
        A stateless :class:`~diffopt.base.GradientTransformation` (``identity()`` when it would
        do nothing).

    Example:
        >>> import torch
        >>> tx = flip_sign_and_add_weight_decay(0.5, maximize=True)
        >>> p = [torch.tensor(2.0)]
        >>> tx.update([torch.tensor(1.0)], tx.init(p), params=p)[0]
        [tensor(0.)]
    """
    check_weight_decay(None, weight_decay)
    if weight_decay == 0.0 and not maximize:
        return identity()

    def init_fn(params):
        del params
        return EmptyState()

    def update_fn(updates, state, *, params=None, inplace=True):
        del inplace
        if weight_decay != 0.0:
            if params is None:
                raise ValueError("weight decay needs params: call update(..., params=params)")
            treespec, grads, (leaves,) = flatten_updates("weight decay", updates, params)
        else:
            treespec, grads, _ = flatten_updates("maximize", updates)
            leaves = grads
        out = []
        for g, p in zip(grads, leaves):
            if g is None:
                out.append(None)
                continue
            if maximize:
                g = -g
            out.append(g + p * weight_decay if weight_decay != 0.0 else g)
        return unflatten(treespec, out), state

    return GradientTransformation(init_fn, update_fn)


def scale_by_neg_lr(lr: float | torch.Tensor | Callable) -> GradientTransformation:
    """Multiply by ``-lr``; ``lr`` may be a schedule ``count -> lr``.

    Args:
        lr: the learning rate: a number, a tensor, or a schedule ``count -> lr``.

    Returns:
        A :class:`~diffopt.base.GradientTransformation`.

    Example:
        >>> import torch
        >>> tx = scale_by_neg_lr(0.1)
        >>> tx.update([torch.tensor(1.0)], tx.init(None))[0]
        [tensor(-0.1000)]
    """
    if callable(lr):
        return scale_by_schedule(lambda count: -lr(count))
    return scale(-lr)
