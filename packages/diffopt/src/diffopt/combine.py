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

from collections.abc import Callable, Hashable, Mapping
from typing import Any, NamedTuple

from diffopt.base import (
    ChainedGradientTransformation,
    GradientTransformation,
    _check_transformation,
    identity,
)

__all__ = ["MultiTransformState", "chain", "chain_flat", "multi_transform"]


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


class MultiTransformState(NamedTuple):
    """State of :func:`multi_transform`: one inner state per label.

    Attributes:
        inner_states: a dict from each label to the :class:`~diffopt.transform.MaskedState` of
            its transformation, which holds state for that label's leaves only.

    Example:
        >>> import torch
        >>> import diffopt
        >>> tx = multi_transform({'a': diffopt.sgd(0.1), 'b': diffopt.adam(0.1)}, ['a', 'b'])
        >>> sorted(tx.init([torch.zeros(1), torch.zeros(2)]).inner_states)
        ['a', 'b']
    """

    inner_states: dict[Hashable, Any]


def multi_transform(transforms: Mapping[Hashable, GradientTransformation],
                    param_labels: Any | Callable[[Any], Any]) -> GradientTransformation:
    """A different transformation for each group of parameters, the groups given by labels.

    Each leaf of the params gets a label (from ``param_labels``, a pytree of labels shaped like
    the params, or a prefix of them, or a function of the params returning one); the leaves of
    a label are updated by ``transforms[label]``, which sees and keeps state for those leaves
    only (as :func:`~diffopt.transform.masked` does). Typical use: no weight decay on biases,
    or a frozen group (``diffopt.transform.set_to_zero()``-like transformations).

    Args:
        transforms: a dict from labels to transformations.
        param_labels: the labels of the leaves, or a function of the params (or updates)
            returning them.

    Returns:
        A :class:`~diffopt.base.GradientTransformation` whose state is a
        :class:`MultiTransformState`.

    Raises:
        ValueError: when a leaf's label has no transformation (at ``init``/``update``).

    Example:
        >>> import torch
        >>> import diffopt
        >>> tx = multi_transform({'fast': diffopt.sgd(1.0), 'slow': diffopt.sgd(0.5)},
        ...                      {'w': 'fast', 'b': 'slow'})
        >>> params = {'w': torch.zeros(1), 'b': torch.zeros(1)}
        >>> grads = {'w': torch.ones(1), 'b': torch.ones(1)}
        >>> tx.update(grads, tx.init(params), params=params)[0]
        {'w': tensor([-1.]), 'b': tensor([-0.5000])}
    """
    import optree_core
    from diffopt.transform.masked import masked

    transforms = dict(transforms)
    for label, inner in transforms.items():
        if not (isinstance(inner, tuple) and len(inner) == 2 and callable(inner[0])
                and callable(inner[1])):
            raise TypeError(f"multi_transform: transforms[{label!r}] is not a "
                            f"GradientTransformation: {inner!r}")

    def labels_of(tree: Any) -> Any:
        labels = param_labels(tree) if callable(param_labels) else param_labels
        try:
            full = optree_core.tree_broadcast_prefix(labels, tree, none_is_leaf=True)
        except ValueError as error:
            raise ValueError(f"multi_transform: param_labels must have the structure of the "
                             f"params, or of a prefix of it: {error}") from None
        unknown = {lab for lab in optree_core.tree_leaves(full, none_is_leaf=True)
                   if lab not in transforms}
        if unknown:
            raise ValueError(f"multi_transform: no transformation for the labels "
                             f"{sorted(map(str, unknown))}; transforms has {sorted(map(str, transforms))}")
        return full

    def mask_for(label: Hashable) -> Callable[[Any], Any]:
        return lambda tree: optree_core.tree_map(lambda lab: lab == label, labels_of(tree),
                                                 none_is_leaf=True)

    masked_transforms = {label: masked(inner, mask_for(label))
                         for label, inner in transforms.items()}

    def init_fn(params):
        labels_of(params)
        return MultiTransformState(
            inner_states={label: tx.init(params) for label, tx in masked_transforms.items()})

    def update_fn(updates, state, *, params=None, inplace=True):
        if not isinstance(state, MultiTransformState):
            raise TypeError(f"multi_transform: expected a MultiTransformState (from init), got "
                            f"{type(state).__name__}")
        new_states = {}
        for label, tx in masked_transforms.items():  # each passes the other labels' leaves on
            updates, new_states[label] = tx.update(updates, state.inner_states[label],
                                                   params=params, inplace=inplace)
        return updates, MultiTransformState(inner_states=new_states)

    return GradientTransformation(init_fn, update_fn)
