"""Distributed meta-learning over ``torch.distributed.rpc`` (TorchOpt's ``torchopt.distributed``).

The same script runs from one process to many under ``torchrun``: :func:`auto_init_rpc` starts
RPC (TensorPipe) from torchrun's environment; rank 0 drives training (:func:`rank_zero_only`) and
sends work to every worker with :func:`remote_sync_call` / :func:`parallelize`, a partitioner
splitting the arguments (:func:`dim_partitioner`: one MAML task per call) and a reducer combining
the results (:func:`mean_reducer`); inside :func:`autograd.context`, meta-gradients flow back
through the gathered results into each worker's inner loop. Failures reach the caller (the
worker's exception with its traceback, or :class:`RemoteCallError` for a dead or stuck worker
after its timeout), and shutdown is graceful on success, immediate on failure.

Example:
    >>> import torch
    >>> calls = dim_partitioner(0, exclusive=True, keepdim=False, workers=[0, 1])(
    ...     torch.zeros(4, 3), lr=0.1)
    >>> [(worker, tuple(args[0].shape), kw) for worker, args, kw in calls]
    [(0, (3,), {'lr': 0.1}), (1, (3,), {'lr': 0.1}), (0, (3,), {'lr': 0.1}), (1, (3,), {'lr': 0.1})]
"""

import torch.distributed.rpc as rpc

from diffopt.distributed import autograd
from diffopt.distributed.api import (
    UNSET_RPC_TIMEOUT,
    RemoteCallError,
    parallelize,
    parallelize_async,
    parallelize_sync,
    remote_async_call,
    remote_sync_call,
)
from diffopt.distributed.partition import (
    TensorDimensionPartitioner,
    batch_partitioner,
    dim_partitioner,
    exclusive_batch_partitioner,
)
from diffopt.distributed.reduce import mean_reducer, sum_reducer
from diffopt.distributed.world import (
    WorldInfo,
    auto_init_rpc,
    barrier,
    default_worker_name_format,
    get_local_rank,
    get_local_world_size,
    get_rank,
    get_worker_id,
    get_world_info,
    get_world_rank,
    get_world_size,
    not_on_rank,
    on_rank,
    rank_non_zero_only,
    rank_zero_only,
)


def is_available() -> bool:
    """Whether this PyTorch build has RPC and distributed autograd.

    Returns:
        ``True`` when both :mod:`torch.distributed.rpc` and :mod:`torch.distributed.autograd` are
        built in; everything else in this package needs them.

    Example:
        >>> import torch
        >>> is_available() == (torch.distributed.rpc.is_available() and autograd.is_available())
        True
    """
    return rpc.is_available() and autograd.is_available()


__all__ = [
    "UNSET_RPC_TIMEOUT",
    "RemoteCallError",
    "TensorDimensionPartitioner",
    "WorldInfo",
    "auto_init_rpc",
    "autograd",
    "barrier",
    "batch_partitioner",
    "default_worker_name_format",
    "dim_partitioner",
    "exclusive_batch_partitioner",
    "get_local_rank",
    "get_local_world_size",
    "get_rank",
    "get_worker_id",
    "get_world_info",
    "get_world_rank",
    "get_world_size",
    "is_available",
    "mean_reducer",
    "not_on_rank",
    "on_rank",
    "parallelize",
    "parallelize_async",
    "parallelize_sync",
    "rank_non_zero_only",
    "rank_zero_only",
    "remote_async_call",
    "remote_sync_call",
    "rpc",
    "sum_reducer",
]
