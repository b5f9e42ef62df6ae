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

from diffopt.base import (
    ChainedGradientTransformation,
    GradientTransformation,
    _check_transformation,
    identity,
)

__all__ = ["chain", "chain_flat"]


def chain(*transformations: GradientTransformation) -> GradientTransformation:
    """Apply ``transformations`` one after the other; the state is the tuple of their states.

    As in TorchOpt: with no argument the result is :func:`~diffopt.base.identity`, with one it is
    that transformation itself, and with more a
    :class:`~diffopt.base.ChainedGradientTransformation` into which nested chains are flattened
    (``chain(a, chain(b, c))`` has a state of three entries) and identities dropped.

    Args:
        *transformations: the transformations, in the order they act on the updates.

    Returns:
        A :class:`~diffopt.base.GradientTransformation`.

    Example:
        >>> import torch
        >>> import diffopt
        >>> tx = chain(diffopt.scale(2.0), diffopt.scale(3.0))
        >>> tx.update([torch.tensor(1.0)], tx.init([torch.tensor(0.0)]))[0]
        [tensor(6.)]
        >>> len(chain(diffopt.scale(2.0), tx).init(None)), chain(tx) is tx
        (3, True)
    """
    if not transformations:
        return identity()
    if len(transformations) == 1:
        _check_transformation(0, transformations[0])
        return transformations[0]
    return ChainedGradientTransformation(*transformations)  # which checks each one


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
