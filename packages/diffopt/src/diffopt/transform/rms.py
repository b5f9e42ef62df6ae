r"""RMSprop's scalings: by the root of a running mean of squares, or by a running std-dev.

.. math::
    \nu_t = \alpha \nu_{t-1} + (1-\alpha) g_t^2, \qquad u_t = g_t / (\sqrt{\nu_t} + \epsilon)

:func:`scale_by_stddev` subtracts the squared running mean first (centered RMSprop). Both put
``eps`` outside the root, as ``torch.optim.RMSprop`` does.

Example:
    >>> import torch
    >>> tx = scale_by_rms(alpha=0.0, eps=0.0)
    >>> tx.update([torch.tensor([-2.0])], tx.init([torch.zeros(1)]))[0]
    [tensor([-1.])]
"""

from __future__ import annotations

from typing import NamedTuple

from diffopt.base import GradientTransformation
from diffopt.transform._leafwise import check_leaf, flatten_updates, unflatten, zeros_like_params
from diffopt.tree_math import safe_sqrt

__all__ = ["ScaleByRStdDevState", "ScaleByRmsState", "scale_by_rms", "scale_by_stddev"]


class ScaleByRmsState(NamedTuple):
    """State of :func:`scale_by_rms`: the running mean of squared updates.

    Attributes:
        nu: exponential moving average of the squared updates, shaped like the parameters.

    Example:
        >>> import torch
        >>> tx = scale_by_rms(alpha=0.9)
        >>> _, state = tx.update({'w': torch.tensor([2.0, -1.0])}, tx.init({'w': torch.zeros(2)}))
        >>> state.nu['w']
        tensor([0.4000, 0.1000])
    """

    nu: object


class ScaleByRStdDevState(NamedTuple):
    """State of :func:`scale_by_stddev`: running mean and running mean of squares.

    Attributes:
        mu: exponential moving average of the updates.
        nu: exponential moving average of the squared updates.

    Example:
        >>> import torch
        >>> tx = scale_by_stddev(alpha=0.9)
        >>> _, state = tx.update({'w': torch.tensor([2.0, -1.0])}, tx.init({'w': torch.zeros(2)}))
        >>> state.mu['w'], state.nu['w']
        (tensor([ 0.2000, -0.1000]), tensor([0.4000, 0.1000]))
    """

    mu: object
    nu: object


def _check(name: str, alpha: float, eps: float) -> None:
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"{name}: alpha must be in [0, 1], got {alpha}")
    if eps < 0.0:
        raise ValueError(f"{name}: eps must be non-negative, got {eps}")


def scale_by_rms(alpha: float = 0.9, eps: float = 1e-8,
                 initial_scale: float = 0.0) -> GradientTransformation:
    """Divide updates by the root of an exponential moving average of their squares.

    Args:
        alpha: smoothing constant of the moving average.
        eps: added to the root.
        initial_scale: initial value of the moving average.

    Returns:
        A :class:`~diffopt.base.GradientTransformation` with :class:`ScaleByRmsState`.

    Example:
        >>> import torch
        >>> tx = scale_by_rms(initial_scale=1.0)
        >>> tx.init([torch.zeros(2)]).nu
        [tensor([1., 1.])]
    """
    _check("scale_by_rms", alpha, eps)

    def init_fn(params):
        return ScaleByRmsState(nu=zeros_like_params("scale_by_rms", params,
                                                    fill_value=initial_scale))

    def update_fn(updates, state, *, params=None, inplace=True):
        del params, inplace
        treespec, grads, (nus,) = flatten_updates("scale_by_rms", updates, state.nu)
        new_updates, new_nus = [], []
        for i, (g, v) in enumerate(zip(grads, nus)):
            if g is None:
                new_updates.append(None)
                new_nus.append(v)
                continue
            check_leaf("scale_by_rms", i, g, v)
            v = v * alpha + g * g * (1 - alpha)
            new_updates.append(g / (safe_sqrt(v) + eps))
            new_nus.append(v)
        return unflatten(treespec, new_updates), ScaleByRmsState(nu=unflatten(treespec, new_nus))

    return GradientTransformation(init_fn, update_fn)


def scale_by_stddev(alpha: float = 0.9, eps: float = 1e-8,
                    initial_scale: float = 0.0) -> GradientTransformation:
    """Divide updates by a running estimate of their standard deviation (centered RMSprop).

    Args:
        alpha: smoothing constant of the moving averages.
        eps: added to the root.
        initial_scale: initial value of the moving average of squares.

    Returns:
        A :class:`~diffopt.base.GradientTransformation` with :class:`ScaleByRStdDevState`.

    Example:
        >>> import torch
        >>> tx = scale_by_stddev(alpha=0.5, eps=0.0)
        >>> tx.update([torch.tensor([2.0])], tx.init([torch.zeros(1)]))[0]
        [tensor([2.])]
    """
    _check("scale_by_stddev", alpha, eps)

    def init_fn(params):
        return ScaleByRStdDevState(
            mu=zeros_like_params("scale_by_stddev", params),
            nu=zeros_like_params("scale_by_stddev", params, fill_value=initial_scale),
        )

    def update_fn(updates, state, *, params=None, inplace=True):
        del params, inplace
        treespec, grads, (mus, nus) = flatten_updates(
            "scale_by_stddev", updates, state.mu, state.nu
        )
        new_updates, new_mus, new_nus = [], [], []
        for i, (g, m, v) in enumerate(zip(grads, mus, nus)):
            if g is None:
                new_updates.append(None)
                new_mus.append(m)
                new_nus.append(v)
                continue
            check_leaf("scale_by_stddev", i, g, m)
            m = m * alpha + g * (1 - alpha)
            v = v * alpha + g * g * (1 - alpha)
            new_updates.append(g / (safe_sqrt(v - m * m) + eps))
            new_mus.append(m)
            new_nus.append(v)
        new_state = ScaleByRStdDevState(mu=unflatten(treespec, new_mus),
                                        nu=unflatten(treespec, new_nus))
        return unflatten(treespec, new_updates), new_state

    return GradientTransformation(init_fn, update_fn)
