"""PyTorch helpers: ravel a tree of tensors into one flat vector and back.

    >>> import torch
    >>> from optree_core.integrations.torch import tree_ravel
    >>> flat, unravel = tree_ravel({'w': torch.ones(2, 2), 'b': torch.zeros(3)})
    >>> flat.shape
    torch.Size([7])
    >>> unravel(flat)['w']
    tensor([[1., 1.],
            [1., 1.]])
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from optree_core.integrations import _ravel
from optree_core.typing import PyTreeTypeVar

__all__ = ["TensorTree", "tree_ravel"]

TensorTree = PyTreeTypeVar("TensorTree", torch.Tensor)

_TORCH = _ravel.ArrayOps(
    noun="tensor",
    article="a",
    is_leaf=torch.is_tensor,
    is_array=torch.is_tensor,
    as_array=lambda t: t,
    dtype=lambda t: t.dtype,
    promote=lambda dtypes: functools.reduce(torch.promote_types, dtypes),
    empty=lambda: torch.zeros(0),
    concatenate=torch.cat,
    ravel=torch.ravel,
    cast=lambda t, dtype: t.to(dtype),
    split=lambda t, sizes: list(torch.split(t, sizes)),
    device=lambda t: t.device,
    to_device=lambda t, device: t.to(device),
)


def tree_ravel(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> tuple[torch.Tensor, Callable[[torch.Tensor], Any]]:
    """Concatenate the tensor leaves of ``tree`` into one 1-D tensor, and give the inverse.

    The flat dtype is the promotion of the leaves' dtypes and its device the first leaf's. When
    all leaves share the dtype, ``unravel`` keeps the dtype of the vector it is given; otherwise
    it needs exactly that dtype and casts each piece back to its leaf's dtype. Each piece goes
    back to its leaf's device. Gradients flow through both directions.

    Args:
        tree: The tree of tensors to ravel.
        is_leaf: Optional predicate called on every node before it is taken apart; nodes it returns
            ``True`` for are leaves.
        none_is_leaf: Whether ``None`` is a leaf (then it must be a tensor, so this fails) or an
            empty node.
        namespace: The namespace whose custom node registrations apply.

    Returns:
        ``(flat, unravel)`` with ``unravel(flat)`` a tree like ``tree``.

    Raises:
        ValueError: if a leaf is not a tensor; ``unravel`` raises ValueError for anything but a
            tensor of the flat shape (and, for mixed-dtype trees, the flat dtype).

    >>> import torch
    >>> w = torch.ones(2, requires_grad=True)
    >>> flat, unravel = tree_ravel({'w': w, 'steps': torch.arange(2)})
    >>> flat
    tensor([0., 1., 1., 1.], grad_fn=<CatBackward0>)
    >>> unravel(flat)['steps'].dtype
    torch.int64
    """
    return _ravel.tree_ravel(_TORCH, tree, is_leaf, none_is_leaf, namespace)


ravel_pytree = tree_ravel  # the name jax.flatten_util uses
