"""Turn the ways a user may give a linear operator into one callable, and check shapes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

import optree_core
from diffopt import tree_math

__all__: list[str] = []

LinearOperator = Callable[[Any], Any]


def _check_square(matrix: torch.Tensor) -> None:
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(
            f"a matrix operator must be a square 2-D tensor, got shape {tuple(matrix.shape)}"
        )


def _apply_matrix(matrix: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    # An (n, n) matrix acts on a leaf whose first dimension is n as ``matrix @ x`` (a vector, a
    # column, or several columns at once); on any other leaf of n elements it acts on the flat
    # vector x.reshape(-1). The two readings agree wherever both apply.
    if x.ndim >= 1 and x.shape[0] == matrix.shape[1]:
        return matrix @ x
    if matrix.shape[1] == x.numel():
        return (matrix @ x.reshape(-1)).reshape(x.shape)
    raise ValueError(
        f"matrix of shape {tuple(matrix.shape)} cannot act on a leaf of shape {tuple(x.shape)}"
    )


def as_linear_operator(A: Any, name: str = "A") -> LinearOperator:
    """Return ``A`` as a callable ``x -> A x``.

    ``A`` may already be a callable, a square matrix (for a tensor ``x``), or a pytree of square
    matrices with the structure of ``x`` (a block-diagonal operator, one block per leaf).
    """
    if callable(A) and not isinstance(A, torch.Tensor):
        return A
    leaves = optree_core.tree_leaves(A)
    if not leaves or not all(isinstance(leaf, torch.Tensor) for leaf in leaves):
        raise TypeError(
            f"{name} must be a callable computing the product {name}(x), a square matrix or a "
            f"pytree of square matrices, got {type(A).__name__}"
        )
    for leaf in leaves:
        _check_square(leaf)
    if isinstance(A, torch.Tensor):
        return lambda x: _apply_matrix(A, x)
    return lambda x: tree_math.tree_map_tensors(_apply_matrix, A, x)


def check_rhs(b: Any, name: str = "b") -> list[torch.Tensor]:
    """Check that ``b`` is a non-empty pytree of floating or complex tensors; return its leaves."""
    leaves = optree_core.tree_leaves(b)
    if not leaves:
        raise ValueError(f"{name} must hold at least one tensor, got an empty pytree")
    for leaf in leaves:
        if not isinstance(leaf, torch.Tensor):
            raise TypeError(f"every leaf of {name} must be a tensor, got {type(leaf).__name__}")
        if not (leaf.is_floating_point() or leaf.is_complex()):
            raise TypeError(f"{name} must hold floating-point tensors, got dtype {leaf.dtype}")
    return leaves


def check_like(x: Any, b: Any, what: str) -> None:
    """Raise a ValueError unless ``x`` has the structure and leaf shapes of ``b``."""
    b_leaves, b_spec = optree_core.tree_flatten(b)
    check_leaves_like(x, b_spec, [leaf.shape for leaf in b_leaves], what)


def check_leaves_like(x: Any, spec: Any, shapes: list[torch.Size], what: str) -> list[Any]:
    """:func:`check_like` against ``b``'s treespec and leaf shapes; return ``x``'s leaves."""
    x_leaves, x_spec = optree_core.tree_flatten(x)
    if x_spec != spec:
        raise ValueError(f"{what} must have the structure of b: got {x_spec}, expected {spec}")
    for x_leaf, shape in zip(x_leaves, shapes):
        if not isinstance(x_leaf, torch.Tensor) or x_leaf.shape != shape:
            got = tuple(x_leaf.shape) if isinstance(x_leaf, torch.Tensor) else type(x_leaf)
            raise ValueError(
                f"{what} must have the leaf shapes of b: got {got}, expected {tuple(shape)}"
            )
    return x_leaves


def tree_size(tree: Any) -> int:
    """Total number of elements over all leaves."""
    return sum(leaf.numel() for leaf in optree_core.tree_leaves(tree))
