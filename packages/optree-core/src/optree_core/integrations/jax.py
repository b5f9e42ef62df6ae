"""JAX helpers: ravel a tree of arrays into one flat ``jax.Array`` and back (as
``jax.flatten_util.ravel_pytree``, with optree_core's namespaces and ``is_leaf``).

    >>> import jax.numpy as jnp  # doctest: +SKIP
    >>> from optree_core.integrations.jax import tree_ravel  # doctest: +SKIP
    >>> flat, unravel = tree_ravel({'a': jnp.ones(2), 'b': jnp.zeros(1)})  # doctest: +SKIP
    >>> flat  # doctest: +SKIP
    Array([1., 1., 0.], dtype=float32)
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from optree_core.integrations import _ravel
from optree_core.typing import PyTreeTypeVar

__all__ = ["ArrayLikeTree", "ArrayTree", "tree_ravel"]

ArrayLikeTree = PyTreeTypeVar("ArrayLikeTree", jax.typing.ArrayLike)
ArrayTree = PyTreeTypeVar("ArrayTree", jax.Array)

_JAX = _ravel.ArrayOps(
    noun="array",
    article="an",
    is_leaf=lambda x: isinstance(x, (jax.Array, int, float, complex, bool)) or hasattr(x, "__jax_array__")
    or hasattr(x, "__array__"),
    is_array=lambda x: isinstance(x, jax.Array) or hasattr(x, "__array__"),
    as_array=jnp.asarray,
    dtype=lambda a: jnp.result_type(a),
    promote=lambda dtypes: jnp.result_type(*dtypes),
    empty=lambda: jnp.zeros(0),
    concatenate=jnp.concatenate,
    ravel=jnp.ravel,
    cast=lambda a, dtype: lax.convert_element_type(a, dtype),
    split=lambda a, sizes: jnp.split(a, list(itertools.accumulate(sizes))[:-1]),
)


def tree_ravel(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> tuple[jax.Array, Callable[[jax.Array], Any]]:
    """Concatenate the array leaves of ``tree`` into one 1-D ``jax.Array``, and give the inverse.

    The rules are numpy's :func:`optree_core.integrations.numpy.tree_ravel`'s, with JAX's dtype
    promotion; ``unravel`` is traceable (usable under ``jax.jit`` and ``jax.grad``).

    Args:
        tree: The tree of arrays to ravel.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (then it must be array-like, so this fails) or an
            empty node.
        namespace: The namespace whose custom node registrations apply.

    Returns:
        ``(flat, unravel)`` with ``unravel(flat)`` a tree like ``tree``.

    Raises:
        ValueError: if a leaf is not array-like, or ``unravel`` is given a vector of another
            shape (or, for mixed-dtype trees, another dtype).

    >>> import jax.numpy as jnp  # doctest: +SKIP
    >>> flat, unravel = tree_ravel([jnp.zeros(2), jnp.ones(1)])  # doctest: +SKIP
    >>> unravel(flat)[1]  # doctest: +SKIP
    Array([1.], dtype=float32)
    """
    return _ravel.tree_ravel(_JAX, tree, is_leaf, none_is_leaf, namespace)


ravel_pytree = tree_ravel  # the name jax.flatten_util uses
