"""PyTorch helpers: ravel a tree of tensors into one flat vector and back.

    >>> import torch
    >>> from optree_core.integration.torch import tree_ravel
    >>> flat, unravel = tree_ravel({'w': torch.ones(2, 2), 'b': torch.zeros(3)})
    >>> flat.shape
    torch.Size([7])
    >>> unravel(flat)['w']
    tensor([[1., 1.],
            [1., 1.]])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from optree_core.ops import tree_flatten

__all__ = ["tree_ravel"]


def tree_ravel(
    tree: Any,
    /,
    is_leaf: Callable[[Any], bool] | None = None,
    *,
    none_is_leaf: bool = False,
    namespace: str = "",
) -> tuple[torch.Tensor, Callable[[torch.Tensor], Any]]:
    """Concatenate the tensor leaves of ``tree`` into one 1-D tensor.

    The dtype is the promotion of the leaves' dtypes; ``unravel`` casts each piece back to its
    leaf's dtype, shape and device. Gradients flow through both directions.

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
        ValueError: if a leaf is not a tensor; ``unravel`` raises ValueError for a tensor of
            another shape and TypeError for one whose dtype does not cast to the flat dtype within
            its kind (complex to real).

    >>> import torch
    >>> w = torch.ones(2, requires_grad=True)
    >>> flat, unravel = tree_ravel({'w': w, 'steps': torch.arange(2)})
    >>> flat
    tensor([0., 1., 1., 1.], grad_fn=<CatBackward0>)
    >>> unravel(flat)['steps'].dtype
    torch.int64
    """
    leaves, spec = tree_flatten(tree, is_leaf, none_is_leaf=none_is_leaf, namespace=namespace)
    for leaf in leaves:
        if not isinstance(leaf, torch.Tensor):
            raise ValueError(f"All leaves must be tensors, got {type(leaf).__name__}: {leaf!r}.")
    if not leaves:
        empty = torch.zeros(0)

        def unravel_empty(flat_vector: torch.Tensor) -> Any:
            _check_flat(flat_vector, empty)
            return spec.unflatten([])

        return empty, unravel_empty
    dtype = leaves[0].dtype
    for leaf in leaves[1:]:
        dtype = torch.promote_types(dtype, leaf.dtype)
    device = leaves[0].device
    shapes = [leaf.shape for leaf in leaves]
    dtypes = [leaf.dtype for leaf in leaves]
    devices = [leaf.device for leaf in leaves]
    sizes = [leaf.numel() for leaf in leaves]
    flat = torch.cat([leaf.reshape(-1).to(dtype=dtype, device=device) for leaf in leaves])

    def unravel(flat_vector: torch.Tensor) -> Any:
        _check_flat(flat_vector, flat)
        pieces = torch.split(flat_vector, sizes)
        return spec.unflatten([p.reshape(s).to(dtype=d, device=dev)
                               for p, s, d, dev in zip(pieces, shapes, dtypes, devices)])

    return flat, unravel


def _check_flat(flat_vector: Any, flat: torch.Tensor) -> None:
    if not isinstance(flat_vector, torch.Tensor) or flat_vector.shape != flat.shape:
        raise ValueError(f"Expected a tensor of shape {tuple(flat.shape)}, got "
                         f"{getattr(flat_vector, 'shape', flat_vector)!r}.")
    # torch.can_cast is torch's same-kind rule: a complex vector cast to real would silently
    # lose its imaginary part.
    if not torch.can_cast(flat_vector.dtype, flat.dtype):
        raise TypeError(f"Expected a tensor of dtype {flat.dtype} (or one that casts to it), got "
                        f"{flat_vector.dtype}.")
