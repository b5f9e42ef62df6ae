"""Apply a transformation to only some of the updates; the others pass through unchanged.

Example:
    >>> import torch
    >>> import diffopt
    >>> tx = masked(diffopt.scale(10.0), {'w': True, 'b': False})
    >>> params = {'w': torch.tensor(1.0), 'b': torch.tensor(1.0)}
    >>> tx.update({'w': torch.tensor(2.0), 'b': torch.tensor(2.0)}, tx.init(params))[0]
    {'w': tensor(20.), 'b': tensor(2.)}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import optree_core
from diffopt.base import GradientTransformation

__all__ = ["MaskedNode", "MaskedState", "masked"]


class MaskedState(NamedTuple):
    """The state of :func:`masked`: the inner transformation's state, for the unmasked leaves.

    Attributes:
        inner_state: what ``inner.init`` returned for the params with the masked-out leaves removed.

    Example:
        >>> import torch
        >>> import diffopt
        >>> tx = masked(diffopt.transform.scale_by_adam(), [True, False])
        >>> state = tx.init([torch.zeros(2), torch.zeros(3)])
        >>> state.inner_state.mu  # moments only for the first leaf
        [tensor([0., 0.]), MaskedNode()]
    """

    inner_state: Any


class MaskedNode(NamedTuple):
    """What stands in a masked-out leaf's place in the trees the inner transformation sees.

    A NamedTuple without fields is a pytree node without leaves, so tree maps and flattening
    skip it while the tree keeps its shape.

    Example:
        >>> import optree_core
        >>> optree_core.tree_leaves({'kept': 1.0, 'masked': MaskedNode()})
        [1.0]
    """


def _flags(name: str, mask_tree: Any, tree: Any) -> list[bool]:
    """One boolean per leaf of ``tree`` (``None`` counted as a leaf), from a mask (prefix) tree."""
    try:
        full = optree_core.tree_broadcast_prefix(mask_tree, tree, none_is_leaf=True)
    except ValueError as error:
        raise ValueError(
            f"{name}: the mask must have the structure of the params/updates, or of a prefix of "
            f"it: {error}"
        ) from None
    flags = []
    for flag in optree_core.tree_leaves(full, none_is_leaf=True):
        if flag is None:  # a callable mask maps over the updates and leaves their Nones
            flags.append(False)
            continue
        try:
            flags.append(bool(flag))
        except (RuntimeError, TypeError, ValueError):
            raise TypeError(f"{name}: mask leaves must be booleans, found {flag!r}") from None
    return flags


def _hide(tree: Any, flags: list[bool]) -> Any:
    leaves, treespec = optree_core.tree_flatten(tree, none_is_leaf=True)
    return optree_core.tree_unflatten(
        treespec, [leaf if keep else MaskedNode() for leaf, keep in zip(leaves, flags)]
    )


def masked(inner: GradientTransformation,
           mask: Any | Callable[[Any], Any] | None = None) -> GradientTransformation:
    """Apply ``inner`` only where ``mask`` is ``True``; elsewhere the updates pass through.

    ``inner`` sees the params and updates with the masked-out leaves removed (replaced by
    :class:`MaskedNode`), so it keeps state only for the leaves it transforms. The typical use is
    weight decay on matrices only: ``masked(add_decayed_weights(1e-4), lambda p:
    tree_map(lambda x: x.ndim > 1, p))``.

    Args:
        inner: the transformation to apply to the selected leaves.
        mask: a pytree of booleans with the structure of the params (or of a prefix of it: one
            boolean then covers a whole subtree), or a function returning one, called on the
            params in ``init`` and on the updates in ``update``. ``None`` selects every leaf.

    Returns:
        A :class:`~diffopt.base.GradientTransformation` whose state is a :class:`MaskedState`.

    Example:
        >>> import torch
        >>> import diffopt
        >>> params = {'w': torch.ones(2, 2), 'b': torch.ones(2)}
        >>> decay_matrices = masked(diffopt.transform.add_decayed_weights(0.5),
        ...                         lambda tree: {k: v.ndim > 1 for k, v in tree.items()})
        >>> grads = {'w': torch.zeros(2, 2), 'b': torch.zeros(2)}
        >>> updates, _ = decay_matrices.update(grads, decay_matrices.init(params), params=params)
        >>> updates['w'][0], updates['b']
        (tensor([0.5000, 0.5000]), tensor([0., 0.]))
    """
    name = "masked"
    if not (isinstance(inner, tuple) and len(inner) == 2 and callable(inner[0])
            and callable(inner[1])):
        raise TypeError(f"{name}: inner must be a GradientTransformation, got {inner!r}")

    def flags_for(tree: Any) -> list[bool]:
        if mask is None:
            return [True] * optree_core.tree_structure(tree, none_is_leaf=True).num_leaves
        return _flags(name, mask(tree) if callable(mask) else mask, tree)

    def init_fn(params):
        return MaskedState(inner_state=inner.init(_hide(params, flags_for(params))))

    def update_fn(updates, state, *, params=None, inplace=True):
        if not isinstance(state, MaskedState):
            raise TypeError(f"{name}: expected a MaskedState (from init), got "
                            f"{type(state).__name__}")
        flags = flags_for(updates)
        leaves, treespec = optree_core.tree_flatten(updates, none_is_leaf=True)
        hidden_params = None
        if params is not None:
            params_spec = optree_core.tree_structure(params, none_is_leaf=True)
            if params_spec != treespec:
                raise ValueError(f"{name}: the updates and params have different structures: "
                                 f"{treespec} vs {params_spec}")
            hidden_params = _hide(params, flags)
        new_hidden, inner_state = inner.update(_hide(updates, flags), state.inner_state,
                                               params=hidden_params, inplace=inplace)
        transformed = iter(optree_core.tree_leaves(new_hidden, none_is_leaf=True))
        kept = sum(flags)
        if optree_core.tree_structure(new_hidden, none_is_leaf=True).num_leaves != kept:
            raise ValueError(f"{name}: the inner transformation changed the structure of the "
                             f"updates it was given")
        out = [next(transformed) if keep else leaf for leaf, keep in zip(leaves, flags)]
        return optree_core.tree_unflatten(treespec, out), MaskedState(inner_state=inner_state)

    return GradientTransformation(init_fn, update_fn)


masked.flat = masked  # type: ignore[attr-defined]  # TorchOpt's masked.flat (for flat lists)
