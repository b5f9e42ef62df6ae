"""Composition of gradient transformations.

Example:
    >>> import torch
    >>> import diffopt
    >>> tx = diffopt.chain(diffopt.clip_grad_norm(1.0), diffopt.scale(-0.5))
    >>> params = [torch.zeros(2)]
    >>> updates, _ = tx.update([torch.tensor([3.0, 4.0])], tx.init(params), params=params)
    >>> updates[0]
    tensor([-0.3000, -0.4000])
"""

from __future__ import annotations

from diffopt.base import GradientTransformation

__all__ = ["chain", "chain_flat"]


def chain(*transformations: GradientTransformation) -> GradientTransformation:
    """Apply ``transformations`` one after the other; the state is the tuple of their states.

    Args:
        *transformations: the transformations, in the order they act on the updates.

    Returns:
        A :class:`~diffopt.base.GradientTransformation` whose state is a tuple with one entry per
        transformation.

    Example:
        >>> import torch
        >>> import diffopt
        >>> tx = chain(diffopt.scale(2.0), diffopt.scale(3.0))
        >>> tx.update([torch.tensor(1.0)], tx.init([torch.tensor(0.0)]))[0]
        [tensor(6.)]
    """
    for i, transformation in enumerate(transformations):
        if not (isinstance(transformation, tuple) and len(transformation) == 2
                and callable(transformation[0]) and callable(transformation[1])):
            raise TypeError(
                f"chain: argument {i} is not a GradientTransformation: {transformation!r}"
            )
    init_fns = tuple(t.init for t in transformations)
    update_fns = tuple(t.update for t in transformations)

    def init_fn(params):
        return tuple(fn(params) for fn in init_fns)

    def update_fn(updates, state, *, params=None, inplace=True):
        if len(state) != len(update_fns):
            raise ValueError(
                f"chain: expected a state with {len(update_fns)} entries, got {len(state)}"
            )
        new_state = []
        for fn, inner_state in zip(update_fns, state):
            updates, inner_state = fn(updates, inner_state, params=params, inplace=inplace)
            new_state.append(inner_state)
        return updates, tuple(new_state)

    return GradientTransformation(init_fn, update_fn)


def chain_flat(*transformations: GradientTransformation) -> GradientTransformation:
    """Alias of :func:`chain` (TorchOpt's ``chain.flat``; updates are always processed flat here).

    Args:
        *transformations: the transformations, in the order they act on the updates.

    Returns:
        The same :class:`~diffopt.base.GradientTransformation` that :func:`chain` builds.

    Example:
        >>> import torch
        >>> import diffopt
        >>> tx = chain_flat(diffopt.scale(2.0), diffopt.scale(-1.0))
        >>> state = tx.init([torch.zeros(1)])
        >>> len(state), tx.update([torch.tensor([1.5])], state)[0]
        (2, [tensor([-3.])])
    """
    return chain(*transformations)


chain.flat = chain_flat  # type: ignore[attr-defined]
