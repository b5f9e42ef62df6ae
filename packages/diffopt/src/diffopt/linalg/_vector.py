"""The vector space the Krylov loops (CG, Neumann) iterate in: one flat tensor, or the pytree.

A pytree whose leaves share one dtype, device and strided layout is iterated as one flat vector
(its leaves concatenated): each vector operation of an iteration is then a single torch call
instead of one per leaf plus a tree traversal, which is most of the solver's own cost when the
operator is cheap or the tree has many leaves (a network's parameters). The operator still sees
and returns trees like ``b``: :meth:`Space.operator` unflattens its input as views of the flat
vector and concatenates its output. Any other tree (mixed dtypes or devices) is iterated leaf by
leaf through :mod:`diffopt.tree_math`. Both are ordinary differentiable torch operations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

import optree_core
from diffopt import tree_math
from diffopt.linalg._operator import check_leaves_like

__all__: list[str] = []


def _flat_compatible(leaves: list[torch.Tensor]) -> bool:
    first = leaves[0]
    return all(
        leaf.layout is torch.strided and leaf.dtype == first.dtype and leaf.device == first.device
        for leaf in leaves
    )


class Space:
    """Vectors shaped like ``b``: ``vector`` / ``tree`` convert, the rest is the algebra CG needs.

    ``scaled_add(x, y, alpha)`` is ``x + alpha * y`` and ``scaled_sub(x, y, alpha)`` is
    ``x - alpha * y`` for a 0-d tensor or number ``alpha``; ``dot`` is the real inner product
    ``sum_i Re<x_i, y_i>`` as a 0-d tensor.
    """

    def __init__(self, b: Any) -> None:
        self.b = b
        leaves, self.spec = optree_core.tree_flatten(b)
        self.flat = _flat_compatible(leaves)
        self.dtype, self.device = leaves[0].dtype, leaves[0].device
        self.shapes = [leaf.shape for leaf in leaves]
        self.sizes = [leaf.numel() for leaf in leaves]

    def vector(self, tree: Any, what: str) -> Any:
        """``tree`` (checked to be shaped like ``b``) as a vector of this space."""
        leaves = check_leaves_like(tree, self.spec, self.shapes, what)
        if not self.flat:
            return tree
        if len(leaves) == 1:
            return leaves[0].reshape(-1)
        return torch.cat([leaf.reshape(-1) for leaf in leaves])

    def tree(self, vector: Any) -> Any:
        """The tree shaped like ``b`` that ``vector`` holds (views of it in the flat case)."""
        if not self.flat:
            return vector
        if len(self.shapes) == 1:
            return optree_core.tree_unflatten(self.spec, [vector.view(self.shapes[0])])
        chunks = vector.split_with_sizes(self.sizes)
        return optree_core.tree_unflatten(
            self.spec, [chunk.view(shape) for chunk, shape in zip(chunks, self.shapes)]
        )

    def operator(self, op: Callable[[Any], Any], what: str) -> Callable[[Any], Any]:
        """``op`` (on trees like ``b``) as a map of this space's vectors, its output checked."""
        return lambda v: self.vector(op(self.tree(v)), f"the output of {what}")

    def zeros(self) -> Any:
        if not self.flat:
            return tree_math.tree_zeros_like(self.b)
        return torch.zeros(sum(self.sizes), dtype=self.dtype, device=self.device)

    def dot(self, x: Any, y: Any) -> torch.Tensor:
        if not self.flat:
            return tree_math.tree_vdot_real(x, y)
        return torch.vdot(x, y).real if self.dtype.is_complex else torch.dot(x, y)

    def scaled_add(self, x: Any, y: Any, alpha: Any) -> Any:
        if not self.flat:
            return tree_math.tree_add_scalar_mul(x, y, alpha)
        if isinstance(alpha, torch.Tensor):
            return torch.addcmul(x, y, alpha)
        return x.add(y, alpha=alpha)

    def scaled_sub(self, x: Any, y: Any, alpha: Any) -> Any:
        if not self.flat:
            return tree_math.tree_sub_scalar_mul(x, y, alpha)
        if isinstance(alpha, torch.Tensor):
            return torch.addcmul(x, y, alpha, value=-1)
        return x.sub(y, alpha=alpha)

    def sub(self, x: Any, y: Any) -> Any:
        return x - y if self.flat else tree_math.tree_sub(x, y)

    def add(self, x: Any, y: Any) -> Any:
        return x + y if self.flat else tree_math.tree_add(x, y)

    def scale(self, alpha: Any, x: Any) -> Any:
        return alpha * x if self.flat else tree_math.tree_scalar_mul(alpha, x)

    def norm(self, x: Any) -> torch.Tensor:
        return torch.linalg.vector_norm(x) if self.flat else tree_math.tree_l2_norm(x)
