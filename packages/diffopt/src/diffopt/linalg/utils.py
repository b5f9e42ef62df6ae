"""Linear-operator helpers, as a public module (TorchOpt's ``torchopt.linalg.utils``).

Example:
    >>> import torch
    >>> from diffopt.linalg.utils import normalize_matvec
    >>> matvec = normalize_matvec(2 * torch.eye(2))
    >>> matvec(torch.tensor([1.0, 3.0]))
    tensor([2., 6.])
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import optree_core
from diffopt.linalg._operator import as_linear_operator

__all__ = ["cat_shapes", "normalize_matvec"]


def normalize_matvec(matvec: Any) -> Callable[[Any], Any]:
    """Return a linear operator as a callable ``x -> A x``, whichever way it was given.

    Args:
        matvec: a callable (returned as it is), a square matrix, or a pytree of square matrices
            (a block-diagonal operator: each matrix acts on the matching leaf of ``x``). A matrix
            ``M`` of size ``n`` maps a leaf whose first dimension is ``n`` to ``M @ x`` (so a
            column or a stack of columns works as well as a vector) and any other leaf of ``n``
            elements to ``(M @ x.reshape(-1)).reshape(x.shape)``.

    Returns:
        The product ``x -> A x`` on pytrees shaped like the operator's domain.

    Raises:
        TypeError: if ``matvec`` is neither callable nor a pytree of tensors.
        ValueError: if a matrix is not square, or, when the product is taken, ``x`` does not
            have the operator's structure or a leaf does not fit its matrix.

    Example:
        >>> import torch
        >>> A = [torch.eye(2), 3 * torch.eye(1)]
        >>> normalize_matvec(A)([torch.ones(2, 1), torch.ones(1, 1)])
        [tensor([[1.],
                [1.]]), tensor([[3.]])]
    """
    return as_linear_operator(matvec, "matvec")


def cat_shapes(tree: Any) -> tuple[int, ...]:
    """The shapes of a tree's tensor leaves, concatenated into one tuple.

    Args:
        tree: a tensor or pytree of tensors.

    Returns:
        ``leaf0.shape + leaf1.shape + ...`` in leaf order.

    Example:
        >>> import torch
        >>> cat_shapes({'a': torch.zeros(2, 3), 'b': torch.zeros(4)})
        (2, 3, 4)
    """
    return tuple(itertools.chain.from_iterable(leaf.shape for leaf in optree_core.tree_leaves(tree)))
