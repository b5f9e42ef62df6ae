"""The one tree_ravel behind the numpy, jax and torch integrations; each passes the few array
operations it needs (``ArrayOps``), so the rules below are written once.

The rules (optree's and ``jax.flatten_util.ravel_pytree``'s): leaves are concatenated in leaf
order into one 1-D array of their promoted dtype. When every leaf has that dtype, ``unravel``
keeps the dtype it is given (so a complex or lower-precision vector unravels as such); when the
dtypes differ, ``unravel`` needs a vector of exactly the promoted dtype and casts each piece back
to its leaf's dtype. A vector of another shape is a ValueError either way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from optree_core.ops import tree_flatten


class ArrayOps(NamedTuple):
    """What tree_ravel needs from an array library."""

    noun: str  # 'array' or 'tensor', for messages
    article: str  # 'an' or 'a'
    is_leaf: Callable[[Any], bool]  # which leaves may be raveled
    is_array: Callable[[Any], bool]  # what unravel accepts
    as_array: Callable[[Any], Any]
    dtype: Callable[[Any], Any]
    promote: Callable[[Sequence[Any]], Any]  # the common dtype of leaf dtypes
    empty: Callable[[], Any]  # the flat vector of a tree without leaves
    concatenate: Callable[[list[Any]], Any]  # of 1-D arrays
    ravel: Callable[[Any], Any]
    cast: Callable[[Any, Any], Any]
    split: Callable[[Any, list[int]], list[Any]]  # a 1-D array into pieces of the given sizes
    device: Callable[[Any], Any] = lambda array: None  # where an array lives (torch: its device)
    to_device: Callable[[Any, Any], Any] = lambda array, device: array


def tree_ravel(ops: ArrayOps, tree: Any, is_leaf: Callable[[Any], bool] | None,
               none_is_leaf: bool, namespace: str) -> tuple[Any, Callable[[Any], Any]]:
    """Ravel ``tree`` with the array library ``ops``; see the module docstring for the rules."""
    leaves, spec = tree_flatten(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    for leaf in leaves:
        if not ops.is_leaf(leaf):
            raise ValueError(f"All leaves must be {ops.noun}s. Got a leaf of type "
                             f"{type(leaf).__name__}: {leaf!r}.")
    arrays = [ops.as_array(leaf) for leaf in leaves]
    dtypes = [ops.dtype(a) for a in arrays]
    shapes = [tuple(a.shape) for a in arrays]
    devices = [ops.device(a) for a in arrays]
    sizes = [math.prod(shape) for shape in shapes]
    if not arrays:
        flat = ops.empty()
        flat_dtype = None
    else:
        flat_dtype = ops.promote(dtypes)
        if all(d == flat_dtype for d in dtypes):
            flat_dtype = None  # one dtype: unravel keeps whatever dtype it is given
        flat = ops.concatenate([ops.to_device(ops.ravel(a) if flat_dtype is None else
                                              ops.cast(ops.ravel(a), flat_dtype), devices[0])
                                for a in arrays])

    def unravel(vector: Any) -> Any:
        _check_vector(ops, vector, (sum(sizes),), flat_dtype)
        chunks = ops.split(vector, sizes) if arrays else []
        pieces = [c.reshape(s) for c, s in zip(chunks, shapes)]
        if flat_dtype is not None:
            pieces = [ops.cast(p, d) for p, d in zip(pieces, dtypes)]
        return spec.unflatten([ops.to_device(p, d) for p, d in zip(pieces, devices)])

    return flat, unravel


def _check_vector(ops: ArrayOps, vector: Any, shape: tuple[int, ...], dtype: Any) -> None:
    if not ops.is_array(vector):
        raise ValueError(f"Expected {ops.article} {ops.noun} to unravel, got {type(vector).__name__}: "
                         f"{vector!r}.")
    if tuple(vector.shape) != shape:
        raise ValueError(f"The unravel function takes {ops.article} {ops.noun} of shape {shape} (the raveled "
                         f"tree's), got one of shape {tuple(vector.shape)}.")
    if dtype is not None and ops.dtype(vector) != dtype:
        # The leaves have different dtypes and the pieces are cast back to them, which is exact
        # only from the dtype ravel produced (complex to real would drop the imaginary parts).
        raise ValueError(f"The unravel function takes {ops.article} {ops.noun} of dtype {dtype} (the raveled "
                         f"tree's leaves have mixed dtypes), got dtype {ops.dtype(vector)}.")
