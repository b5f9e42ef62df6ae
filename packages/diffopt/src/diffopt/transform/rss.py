r"""AdaGrad's scaling: by the root of the sum of all past squared updates.

.. math::
    s_t = s_{t-1} + g_t^2, \qquad u_t = g_t / (\sqrt{s_t} + \epsilon)

Example:
    >>> import torch
    >>> tx = scale_by_rss(initial_accumulator_value=0.0, eps=0.0)
    >>> tx.update([torch.tensor([-3.0])], tx.init([torch.zeros(1)]))[0]
    [tensor([-1.])]
"""

from __future__ import annotations

from typing import NamedTuple

from diffopt.base import GradientTransformation
from diffopt.transform._leafwise import check_leaf, flatten_updates, unflatten, zeros_like_params
from diffopt.tree_math import safe_sqrt

__all__ = ["ScaleByRssState", "scale_by_rss"]


class ScaleByRssState(NamedTuple):
    """State of :func:`scale_by_rss`: the sums of squared updates.

    Attributes:
        sum_of_squares: ``initial_accumulator_value`` plus the sum of all past squared updates.

    Example:
        >>> import torch
        >>> tx = scale_by_rss(initial_accumulator_value=0.5)
        >>> state = tx.init({'w': torch.zeros(2)})
        >>> _, state = tx.update({'w': torch.tensor([2.0, -1.0])}, state)
        >>> state.sum_of_squares['w']
        tensor([4.5000, 1.5000])
    """

    sum_of_squares: object


def scale_by_rss(initial_accumulator_value: float = 0.1,
                 eps: float = 1e-7) -> GradientTransformation:
    """Rescale updates by the root of the sum of squares of all past updates (Duchi et al., 2011).

    Args:
        initial_accumulator_value: starting value of the sums.
        eps: added to the root (outside it, as ``torch.optim.Adagrad`` does).

    Returns:
        A :class:`~diffopt.base.GradientTransformation` with :class:`ScaleByRssState`.

    Example:
        >>> import torch
        >>> scale_by_rss(0.5).init([torch.zeros(1)]).sum_of_squares
        [tensor([0.5000])]
    """
    if initial_accumulator_value < 0.0 or eps < 0.0:
        raise ValueError("scale_by_rss: initial_accumulator_value and eps must be non-negative")

    def init_fn(params):
        return ScaleByRssState(sum_of_squares=zeros_like_params(
            "scale_by_rss", params, fill_value=initial_accumulator_value))

    def update_fn(updates, state, *, params=None, inplace=True):
        del params, inplace
        treespec, grads, (sums,) = flatten_updates("scale_by_rss", updates, state.sum_of_squares)
        new_updates, new_sums = [], []
        for i, (g, s) in enumerate(zip(grads, sums)):
            if g is None:
                new_updates.append(None)
                new_sums.append(s)
                continue
            check_leaf("scale_by_rss", i, g, s)
            s = s + g * g
            new_updates.append(g / (safe_sqrt(s) + eps))
            new_sums.append(s)
        return (unflatten(treespec, new_updates),
                ScaleByRssState(sum_of_squares=unflatten(treespec, new_sums)))

    return GradientTransformation(init_fn, update_fn)
