"""Reducers: how the results of the per-worker calls are combined into one.

Results may be tensors or pytrees of tensors of one structure (say ``(loss, accuracy)``); the
reduction is leaf by leaf and differentiable, so meta-gradients flow back through it to every
worker's result.

``mean_reducer`` averages the *results*: with :func:`~diffopt.distributed.batch_partitioner`
and a batch that does not divide evenly among the workers, the mean of the per-block means is
not the mean over the batch; use ``dim_partitioner(0, exclusive=True)`` (equal blocks of one) or
return sums and use :func:`sum_reducer` when that matters.

Example:
    >>> import torch
    >>> mean_reducer([torch.tensor(1.0), torch.tensor(3.0)])
    tensor(2.)
    >>> sum_reducer([(torch.tensor(1.0), torch.tensor([1.0, 2.0])),
    ...              (torch.tensor(2.0), torch.tensor([3.0, 4.0]))])
    (tensor(3.), tensor([4., 6.]))
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

import optree_core

__all__ = ["mean_reducer", "sum_reducer"]


def _reduce(name: str, results: Iterable[Any], op) -> Any:
    results = list(results)
    if not results:
        raise ValueError(f"{name}: no results to reduce")
    leaves0, treespec = optree_core.tree_flatten(results[0])
    columns = [[leaf] for leaf in leaves0]
    for i, result in enumerate(results[1:], start=1):
        leaves, spec = optree_core.tree_flatten(result)
        if spec != treespec:
            raise ValueError(f"{name}: result {i} has structure {spec}, result 0 has {treespec}")
        for column, leaf in zip(columns, leaves):
            column.append(leaf)
    reduced = []
    for index, column in enumerate(columns):
        if not all(isinstance(v, torch.Tensor) for v in column):
            column = [torch.as_tensor(v) for v in column]
        shapes = {tuple(v.shape) for v in column}
        if len(shapes) > 1:
            raise ValueError(f"{name}: leaf {index} of the results has different shapes "
                             f"{sorted(shapes)}")
        reduced.append(op(torch.stack(column, dim=0), dim=0))
    return optree_core.tree_unflatten(treespec, reduced)


def mean_reducer(results: Iterable[Any]) -> Any:
    """The element-wise mean of the results (tensors, or pytrees of tensors).

    Args:
        results: the per-call results, all with one structure and leaf shapes (numbers are
            converted to tensors).

    Returns:
        A result of the same structure holding the leaf-wise means (differentiable).

    Raises:
        ValueError: if there are no results, or their structures or shapes differ.

    Example:
        >>> import torch
        >>> mean_reducer([{'loss': torch.tensor(1.0)}, {'loss': torch.tensor(2.0)}])
        {'loss': tensor(1.5000)}
    """
    return _reduce("mean_reducer", results, torch.mean)


def sum_reducer(results: Iterable[Any]) -> Any:
    """The element-wise sum of the results (tensors, or pytrees of tensors).

    Args:
        results: the per-call results, all with one structure and leaf shapes (numbers are
            converted to tensors).

    Returns:
        A result of the same structure holding the leaf-wise sums (differentiable).

    Raises:
        ValueError: if there are no results, or their structures or shapes differ.

    Example:
        >>> import torch
        >>> sum_reducer([torch.tensor([1.0, 2.0]), torch.tensor([3.0, 4.0]), torch.tensor([5.0, 6.0])])
        tensor([ 9., 12.])
    """
    return _reduce("sum_reducer", results, torch.sum)
