"""The functional optimizer protocol: a :class:`GradientTransformation` is a pair of pure functions.

``init(params) -> state`` builds the optimizer state for a pytree of parameters;
``update(updates, state, *, params=None, inplace=True) -> (updates, state)`` turns gradients into
updates that :func:`diffopt.apply_updates` adds to the parameters. Optimizers are chains of such
transformations (:func:`diffopt.chain`), as in optax.

With ``inplace=False`` every operation is out of place, so the whole update is differentiable and
an outer loss can back-propagate through it; ``inplace=True`` allows (but does not require) reuse
of the input buffers and is what the PyTorch-style optimizers use.

Example:
    >>> import torch
    >>> import diffopt
    >>> tx = diffopt.sgd(lr=0.1)
    >>> params = {'w': torch.tensor([1.0, 2.0])}
    >>> state = tx.init(params)
    >>> updates, state = tx.update({'w': torch.tensor([1.0, 1.0])}, state, params=params)
    >>> updates['w']
    tensor([-0.1000, -0.1000])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

__all__ = [
    "EmptyState",
    "GradientTransformation",
    "OptState",
    "Params",
    "TransformInitFn",
    "TransformUpdateFn",
    "Updates",
    "identity",
]

Params = Any  # a pytree of tensors
Updates = Any  # a pytree of tensors shaped like Params (None where there is no gradient)
OptState = Any  # a pytree (usually NamedTuples) of tensors


class TransformInitFn(Protocol):
    """The type of a transformation's ``init(params) -> state`` function.

    Args:
        params: the pytree of parameters the optimizer will update.

    Returns:
        The initial optimizer state (a pytree, usually of NamedTuples of tensors).

    Example:
        >>> import torch
        >>> import diffopt
        >>> init: TransformInitFn = diffopt.adam(lr=0.1).init
        >>> state = init({'w': torch.ones(2)})  # (weight decay, Adam moments, scaling)
        >>> state[1].mu['w'], int(state[1].count)
        (tensor([0., 0.]), 0)
    """

    def __call__(self, params: Params) -> OptState: ...


class TransformUpdateFn(Protocol):
    """The type of a transformation's ``update(updates, state, *, params=None, inplace=True)`` function.

    Args:
        updates: a pytree of gradients (or of updates from an earlier transformation).
        state: the state returned by ``init`` or by the previous ``update``.
        params: the current parameters, for transformations that need them (weight decay).
        inplace: allow reusing the input buffers; pass ``False`` to keep every op differentiable.

    Returns:
        ``(new_updates, new_state)``.

    Example:
        >>> import torch
        >>> import diffopt
        >>> tx = diffopt.sgd(lr=0.5)
        >>> update: TransformUpdateFn = tx.update
        >>> params = [torch.tensor([2.0])]
        >>> update([torch.tensor([4.0])], tx.init(params), params=params, inplace=False)[0]
        [tensor([-2.])]
    """

    def __call__(
        self, updates: Updates, state: OptState, *, params: Params | None = None,
        inplace: bool = True,
    ) -> tuple[Updates, OptState]: ...


class EmptyState(NamedTuple):
    """The state of a stateless transformation: a NamedTuple with no fields.

    Example:
        >>> import torch
        >>> import diffopt
        >>> state = diffopt.scale(0.5).init([torch.ones(3)])
        >>> state == EmptyState(), len(state)
        (True, 0)
    """


class GradientTransformation(NamedTuple):
    """A pair of pure functions ``(init, update)`` that together form an optimizer.

    Attributes:
        init: builds the initial state from the parameters.
        update: maps ``(updates, state)`` to ``(new_updates, new_state)``.

    Example:
        >>> import torch
        >>> tx = identity()
        >>> tx.update([torch.tensor(1.0)], tx.init([torch.tensor(0.0)]))[0]
        [tensor(1.)]
    """

    init: Callable[..., OptState]
    update: Callable[..., tuple[Updates, OptState]]

    def chain(self, *others: GradientTransformation) -> GradientTransformation:
        """This transformation followed by ``others`` (see :func:`diffopt.chain`)."""
        from diffopt.combine import chain

        return chain(self, *others)


def identity() -> GradientTransformation:
    """A stateless transformation that returns the updates unchanged.

    Returns:
        A :class:`GradientTransformation` whose state is :class:`EmptyState`.

    Example:
        >>> import torch
        >>> tx = identity()
        >>> state = tx.init({'a': torch.zeros(1)})
        >>> tx.update({'a': torch.tensor([0.25])}, state)
        ({'a': tensor([0.2500])}, EmptyState())
    """

    def init_fn(params: Params) -> OptState:
        del params
        return EmptyState()

    def update_fn(updates, state, *, params=None, inplace=True):
        del params, inplace
        return updates, state

    return GradientTransformation(init_fn, update_fn)
