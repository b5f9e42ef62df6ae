"""NumPy helpers: ravel a tree of arrays into one flat array and back.

    >>> import numpy as np
    >>> from optree_core.integration.numpy import tree_ravel
    >>> flat, unravel = tree_ravel({'a': np.ones((2, 2)), 'b': np.arange(3)})
    >>> flat
    array([1., 1., 1., 1., 0., 1., 2.])
    >>> unravel(flat)['b']
    array([0, 1, 2])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from optree_core.ops import tree_flatten

__all__ = ["tree_ravel"]


def tree_ravel(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> tuple[np.ndarray, Callable[[np.ndarray], Any]]:
    """Concatenate the array leaves of ``tree`` into one 1-D array (dtype: their promotion);
    ``unravel`` restores each leaf's shape and dtype.

    Args:
        tree: The tree of arrays to ravel.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (then it must be array-like, so this fails) or an
            empty node.
        namespace: The namespace whose custom node registrations apply.

    Raises:
        ValueError: if a leaf is not array-like; ``unravel`` raises ValueError for an array of
            another shape and TypeError for one whose dtype does not cast to the flat dtype within
            its kind (complex to real).

    >>> import numpy as np
    >>> flat, unravel = tree_ravel([np.zeros(2, np.float32), np.ones((1, 2))])
    >>> flat.dtype, flat.shape
    (dtype('float64'), (4,))
    >>> [a.dtype for a in unravel(flat * 2)]
    [dtype('float32'), dtype('float64')]
    """
    leaves, spec = tree_flatten(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    arrays = []
    for leaf in leaves:
        if not isinstance(leaf, (np.ndarray, np.generic, int, float, complex, bool)):
            raise ValueError(f"All leaves must be arrays or scalars, got "
                             f"{type(leaf).__name__}: {leaf!r}.")
        arrays.append(np.asarray(leaf))
    dtype = np.result_type(*arrays) if arrays else np.float64
    shapes = [a.shape for a in arrays]
    dtypes = [a.dtype for a in arrays]
    sizes = [a.size for a in arrays]
    flat = (np.concatenate([a.reshape(-1).astype(dtype) for a in arrays]) if arrays
            else np.zeros(0, dtype))
    offsets = np.cumsum([0, *sizes])

    def unravel(flat_array: np.ndarray) -> Any:
        flat_array = np.asarray(flat_array)
        if flat_array.shape != flat.shape:
            raise ValueError(f"Expected an array of shape {flat.shape}, got {flat_array.shape}.")
        # Casting across kinds (complex to real) would silently drop the imaginary parts.
        if not np.can_cast(flat_array.dtype, flat.dtype, casting="same_kind"):
            raise TypeError(f"Expected an array of dtype {flat.dtype} (or one that casts to it), got "
                            f"{flat_array.dtype}.")
        return spec.unflatten([flat_array[offsets[i]:offsets[i + 1]].reshape(s).astype(d)
                               for i, (s, d) in enumerate(zip(shapes, dtypes))])

    return flat, unravel
