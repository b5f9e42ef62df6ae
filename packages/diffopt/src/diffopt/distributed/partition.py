"""Partitioners: how the arguments of one call are split into one call per worker.

A partitioner takes the call's ``*args, **kwargs`` and returns a list of
``(worker_id, worker_args, worker_kwargs)`` triplets. :class:`TensorDimensionPartitioner` splits
every tensor in the arguments (found through the pytree, so tensors inside tuples, lists and
dicts are split too) along one dimension and hands every other value (a module, a number) to
each call unchanged. Slices are views: nothing is copied until RPC sends them.

Example:
    >>> import torch
    >>> split = dim_partitioner(0, workers=[0, 1])
    >>> [(worker, args[0].tolist()) for worker, args, _ in split(torch.arange(5), 'lr')]
    [(0, [0, 1, 2]), (1, [3, 4])]
    >>> [args[1] for _, args, _ in split(torch.arange(5), 'lr')]
    ['lr', 'lr']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

import optree_core

__all__ = [
    "PartitionFunction",
    "TensorDimensionPartitioner",
    "batch_partitioner",
    "dim_partitioner",
    "exclusive_batch_partitioner",
]

Args = tuple[Any, ...]
KwArgs = dict[str, Any]
PartitionFunction = Callable[..., Sequence[tuple[int, Args, KwArgs]]]


class TensorDimensionPartitioner:
    """Split every tensor argument along dimension ``dim`` and deal the pieces to workers.

    ``batch_partitioner`` is ``TensorDimensionPartitioner(0)`` (contiguous blocks of the first
    dimension, one per worker) and ``exclusive_batch_partitioner`` is
    ``TensorDimensionPartitioner(0, exclusive=True)`` (one call per index, slices of length 1).

    Args:
        dim: the dimension to split (negative counts from the end).
        exclusive: ``True``: one call per index along ``dim`` (one task per call, dealt to the
            workers round-robin); ``False``: at most one call per worker, each with a contiguous
            block of indices, block sizes differing by at most one.
        keepdim: keep the split dimension (slices of length 1 when ``exclusive``); ``False``
            selects the index instead and needs ``exclusive=True``.
        workers: worker ids or names to use (default: every worker in the world).

    Raises:
        ValueError: ``keepdim=False`` without ``exclusive=True``; at call time, tensors whose
            sizes along ``dim`` differ, or that have no dimension ``dim``.

    Example:
        >>> import torch
        >>> split = TensorDimensionPartitioner(-1, workers=[0, 1, 2])
        >>> calls = split(torch.arange(8).reshape(2, 4), scale=2.0)
        >>> [(worker, args[0].tolist(), kwargs) for worker, args, kwargs in calls]
        [(0, [[0, 1], [4, 5]], {'scale': 2.0}), (1, [[2], [6]], {'scale': 2.0}), (2, [[3], [7]], {'scale': 2.0})]
    """

    def __init__(self, dim: int, *, exclusive: bool = False, keepdim: bool = True,
                 workers: Sequence[int | str] | None = None) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise TypeError(f"dim must be an int, got {type(dim).__name__}")
        if not keepdim and not exclusive:
            raise ValueError("keepdim=False selects one index per call, so it needs exclusive=True")
        if workers is not None:
            workers = list(workers)
            if not workers:
                raise ValueError("workers must not be empty (None means every worker)")
        self.dim = dim
        self.exclusive = bool(exclusive)
        self.keepdim = bool(keepdim)
        self.workers = workers

    def __repr__(self) -> str:
        return (f"TensorDimensionPartitioner(dim={self.dim}, exclusive={self.exclusive}, "
                f"keepdim={self.keepdim}, workers={self.workers})")

    def _worker_ids(self) -> list[int]:
        from diffopt.distributed.world import get_worker_id, get_world_size

        if self.workers is None:
            return list(range(get_world_size()))
        # Ids are taken as given (RPC rejects unknown ones), so a partition can be planned and
        # tested without RPC running; names need RPC to be resolved.
        return [w if isinstance(w, int) and not isinstance(w, bool) and w >= 0
                else get_worker_id(w) for w in self.workers]

    def __call__(self, *args: Any, **kwargs: Any) -> list[tuple[int, Args, KwArgs]]:
        """The ``(worker_id, args, kwargs)`` of each call."""
        leaves, treespec = optree_core.tree_flatten((args, kwargs))
        size = None
        for leaf in leaves:
            if not isinstance(leaf, torch.Tensor):
                continue
            if not -leaf.dim() <= self.dim < leaf.dim():
                raise ValueError(f"cannot split a tensor of shape {tuple(leaf.shape)} along "
                                 f"dim={self.dim}: every tensor argument is split; pass "
                                 f"constants as Python numbers")
            if size is None:
                size = leaf.shape[self.dim]
            elif leaf.shape[self.dim] != size:
                raise ValueError(f"tensor arguments disagree on their size along dim={self.dim}: "
                                 f"{size} and {leaf.shape[self.dim]} "
                                 f"(shape {tuple(leaf.shape)})")
        workers = self._worker_ids()
        if size is None:  # nothing to split: one call, on the first worker
            return [(workers[0], args, dict(kwargs))]
        if size == 0:
            raise ValueError(f"cannot split tensors of size 0 along dim={self.dim}")
        if self.exclusive:
            pieces: list[int | slice] = ([slice(i, i + 1) for i in range(size)] if self.keepdim
                                         else list(range(size)))
        else:
            count = min(size, len(workers))
            base, extra = divmod(size, count)
            bounds = [0]
            for i in range(count):
                bounds.append(bounds[-1] + base + (1 if i < extra else 0))
            pieces = [slice(bounds[i], bounds[i + 1]) for i in range(count)]

        calls = []
        for i, piece in enumerate(pieces):
            index = _index(self.dim, piece)
            part = [leaf[index] if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
            worker_args, worker_kwargs = optree_core.tree_unflatten(treespec, part)
            calls.append((workers[i % len(workers)], tuple(worker_args), dict(worker_kwargs)))
        return calls

    def __reduce__(self):
        # Picklable (partitioners travel inside parallelized functions' closures).
        return (_rebuild, (self.dim, self.exclusive, self.keepdim, self.workers))


def _rebuild(dim: int, exclusive: bool, keepdim: bool, workers: Any) -> TensorDimensionPartitioner:
    return TensorDimensionPartitioner(dim, exclusive=exclusive, keepdim=keepdim, workers=workers)


def _index(dim: int, piece: int | slice) -> tuple[Any, ...]:
    if dim >= 0:
        return (slice(None),) * dim + (piece,)
    return (Ellipsis, piece) + (slice(None),) * (-dim - 1)


def dim_partitioner(dim: int = 0, *, exclusive: bool = False, keepdim: bool = True,
                    workers: Sequence[int | str] | None = None) -> PartitionFunction:
    """A :class:`TensorDimensionPartitioner`: split tensor arguments along ``dim`` among workers.

    ``dim_partitioner(0, exclusive=True, keepdim=False)`` turns a batch of tasks of shape
    ``(T, B, ...)`` into ``T`` calls on tensors of shape ``(B, ...)``: distributed MAML's inner
    loops, one task per call.

    Args:
        dim: the dimension to split (negative counts from the end).
        exclusive: one call per index along ``dim`` (``True``), or one contiguous block per worker.
        keepdim: keep the split dimension; ``False`` needs ``exclusive=True``.
        workers: worker ids or names to use (default: every worker in the world).

    Returns:
        The partition function ``(*args, **kwargs) -> [(worker_id, args, kwargs), ...]``.

    Example:
        >>> import torch
        >>> calls = dim_partitioner(0, exclusive=True, keepdim=False, workers=[0, 1])(
        ...     torch.zeros(3, 5))
        >>> [(worker, tuple(args[0].shape)) for worker, args, _ in calls]
        [(0, (5,)), (1, (5,)), (0, (5,))]
    """
    return TensorDimensionPartitioner(dim, exclusive=exclusive, keepdim=keepdim, workers=workers)


batch_partitioner: PartitionFunction = dim_partitioner(0, exclusive=False, keepdim=True)
"""Split along the first dimension into at most one contiguous block per worker."""

exclusive_batch_partitioner: PartitionFunction = dim_partitioner(0, exclusive=True, keepdim=True)
"""Split along the first dimension into one call per index (slices of length 1)."""
