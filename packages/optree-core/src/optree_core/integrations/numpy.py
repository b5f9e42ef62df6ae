"""NumPy helpers: ravel a tree of arrays into one flat array and back.

    >>> import numpy as np
    >>> from optree_core.integrations.numpy import tree_ravel
    >>> flat, unravel = tree_ravel({'a': np.ones((2, 2)), 'b': np.arange(3)})
    >>> flat
    array([1., 1., 1., 1., 0., 1., 2.])
    >>> unravel(flat)['b']
    array([0, 1, 2])
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from optree_core.integrations import _ravel
from optree_core.typing import PyTreeTypeVar

__all__ = ["ArrayLikeTree", "ArrayTree", "tree_ravel"]

ArrayLikeTree = PyTreeTypeVar("ArrayLikeTree", np.typing.ArrayLike)
ArrayTree = PyTreeTypeVar("ArrayTree", np.ndarray)

_NUMPY = _ravel.ArrayOps(
    noun="array",
    article="an",
    is_leaf=lambda x: isinstance(x, (np.ndarray, np.generic, int, float, complex, bool)),
    is_array=lambda x: isinstance(x, np.ndarray),
    as_array=np.asarray,
    dtype=lambda a: np.asarray(a).dtype,
    promote=lambda dtypes: np.result_type(*dtypes),
    empty=lambda: np.zeros(0),
    concatenate=np.concatenate,
    ravel=np.ravel,
    cast=lambda a, dtype: a.astype(dtype),
    split=lambda a, sizes: np.split(a, list(itertools.accumulate(sizes))[:-1]),
)


def tree_ravel(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> tuple[np.ndarray, Callable[[np.ndarray], Any]]:
    """Concatenate the array leaves of ``tree`` into one 1-D array, and give the inverse.

    The flat dtype is the promotion of the leaves' dtypes. When all leaves share it, ``unravel``
    keeps the dtype of the vector it is given; otherwise it needs exactly that dtype and casts
    each piece back to its leaf's dtype.

    Args:
        tree: The tree of arrays (NumPy arrays or scalars) to ravel.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (then it must be array-like, so this fails) or an
            empty node.
        namespace: The namespace whose custom node registrations apply.

    Returns:
        ``(flat, unravel)`` with ``unravel(flat)`` a tree like ``tree``.

    Raises:
        ValueError: if a leaf is not array-like; ``unravel`` raises ValueError for anything but
            an array of the flat shape (and, for mixed-dtype trees, the flat dtype).

    >>> import numpy as np
    >>> flat, unravel = tree_ravel([np.zeros(2, np.float32), np.ones((1, 2))])
    >>> flat.dtype, flat.shape
    (dtype('float64'), (4,))
    >>> [a.dtype for a in unravel(flat * 2)]
    [dtype('float32'), dtype('float64')]
    """
    return _ravel.tree_ravel(_NUMPY, tree, is_leaf, none_is_leaf, namespace)


ravel_pytree = tree_ravel  # the name jax.flatten_util uses
