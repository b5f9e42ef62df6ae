"""Who am I in the world: ranks from torchrun's environment, RPC start-up and clean shutdown.

``torchrun`` sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``
and ``MASTER_PORT`` in every process it starts; :func:`auto_init_rpc` reads them, starts
``torch.distributed.rpc`` (TensorPipe), runs the decorated function and shuts RPC down: gracefully
(every worker waits for the others) when the function returns, locally and at once when it raises,
so a failure on one worker never leaves the others waiting forever. Run without torchrun, a
script is a world of one worker.

Example:
    >>> info = get_world_info()
    >>> info.world_size >= 1 and 0 <= info.rank < info.world_size
    True
    >>> default_worker_name_format(world_rank=3, world_size=4, local_rank=1, local_world_size=2)
    'worker3'
"""

from __future__ import annotations

import functools
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple, TypeVar

import torch.distributed.rpc as rpc

__all__ = [
    "WorldInfo",
    "auto_init_rpc",
    "barrier",
    "default_worker_name_format",
    "get_local_rank",
    "get_local_world_size",
    "get_rank",
    "get_worker_id",
    "get_world_info",
    "get_world_rank",
    "get_world_size",
    "not_on_rank",
    "on_rank",
    "rank_non_zero_only",
    "rank_zero_only",
]

F = TypeVar("F", bound=Callable[..., Any])

# Rank 0 polls the other workers every _POLL_INTERVAL_S until all have finished, giving up on
# one that does not answer within _PING_TIMEOUT_S; then torch's shutdown gets
# _FINAL_SHUTDOWN_TIMEOUT_S.
_PING_TIMEOUT_S = 30.0
_POLL_INTERVAL_S = 0.2
_FINAL_SHUTDOWN_TIMEOUT_S = 60.0


def default_worker_name_format(*, world_rank: int, world_size: int, local_rank: int,
                               local_world_size: int) -> str:
    """``'worker{world_rank}'``: the RPC name of each worker (TorchOpt's default).

    Args:
        world_rank: the global rank of the worker.
        world_size: the number of workers (unused by this format).
        local_rank: the rank on its machine (unused by this format).
        local_world_size: the number of workers on its machine (unused by this format).

    Returns:
        The worker's RPC name.

    Example:
        >>> default_worker_name_format(world_rank=3, world_size=4, local_rank=1, local_world_size=2)
        'worker3'
    """
    del world_size, local_rank, local_world_size
    return f"worker{world_rank}"


_worker_name_format: Callable[..., str] = default_worker_name_format


class WorldInfo(NamedTuple):
    """The ranks of this process, as torchrun describes them.

    Attributes:
        world_rank: the global rank (also :attr:`rank`).
        world_size: the number of processes in the world.
        local_rank: the rank of this process on its machine.
        local_world_size: the number of processes on this machine.

    Example:
        >>> info = WorldInfo(world_rank=2, world_size=4, local_rank=0, local_world_size=2)
        >>> info.rank, info.worker_name
        (2, 'worker2')
    """

    world_rank: int
    world_size: int
    local_rank: int
    local_world_size: int

    @property
    def rank(self) -> int:
        """The global rank (``world_rank``)."""
        return self.world_rank

    @property
    def worker_name(self) -> str:
        """This process's RPC name (``'worker{rank}'`` unless :func:`auto_init_rpc` was given
        another ``worker_name_format``)."""
        return _worker_name_format(world_rank=self.world_rank, world_size=self.world_size,
                                   local_rank=self.local_rank,
                                   local_world_size=self.local_world_size)


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name} must be an integer, got {value!r}") from None


def get_world_info() -> WorldInfo:
    """This process's ranks: from RPC when it is running, else from torchrun's environment.

    Without RPC and without torchrun's variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
    ``LOCAL_WORLD_SIZE``) the process is a world of one.

    Returns:
        A :class:`WorldInfo`.

    Raises:
        ValueError: if the variables are malformed or inconsistent.

    Example:
        >>> import os
        >>> from unittest import mock
        >>> env = {'RANK': '1', 'WORLD_SIZE': '4', 'LOCAL_RANK': '1', 'LOCAL_WORLD_SIZE': '2'}  # as torchrun sets
        >>> with mock.patch.dict(os.environ, env):
        ...     get_world_info()
        WorldInfo(world_rank=1, world_size=4, local_rank=1, local_world_size=2)
    """
    if _rpc_running():
        agent = rpc._get_current_rpc_agent()
        rank, size = agent.get_worker_info().id, len(agent.get_worker_infos())
    else:
        rank, size = _env_int("RANK", 0), _env_int("WORLD_SIZE", 1)
    info = WorldInfo(rank, size, _env_int("LOCAL_RANK", 0), _env_int("LOCAL_WORLD_SIZE", 1))
    if info.world_size < 1 or not 0 <= info.world_rank < info.world_size:
        raise ValueError(f"inconsistent RANK={info.world_rank} / WORLD_SIZE={info.world_size}")
    if info.local_world_size < 1 or not 0 <= info.local_rank < info.local_world_size:
        raise ValueError(f"inconsistent LOCAL_RANK={info.local_rank} / "
                         f"LOCAL_WORLD_SIZE={info.local_world_size}")
    return info


def get_world_rank() -> int:
    """The global rank of this process (also exported as ``get_rank``).

    Returns:
        An int in ``[0, get_world_size())``.

    Example:
        >>> import os
        >>> from unittest import mock
        >>> env = {'RANK': '1', 'WORLD_SIZE': '4', 'LOCAL_RANK': '1', 'LOCAL_WORLD_SIZE': '2'}  # as torchrun sets
        >>> with mock.patch.dict(os.environ, env):
        ...     get_world_rank()
        1
    """
    return get_world_info().world_rank


get_rank = get_world_rank


def get_world_size() -> int:
    """The number of processes in the world.

    Returns:
        A positive int (1 when run without torchrun).

    Example:
        >>> import os
        >>> from unittest import mock
        >>> env = {'RANK': '1', 'WORLD_SIZE': '4', 'LOCAL_RANK': '1', 'LOCAL_WORLD_SIZE': '2'}  # as torchrun sets
        >>> with mock.patch.dict(os.environ, env):
        ...     get_world_size()
        4
    """
    return get_world_info().world_size


def get_local_rank() -> int:
    """The rank of this process on its machine (e.g. the GPU it should use).

    Returns:
        An int in ``[0, get_local_world_size())``.

    Example:
        >>> import os
        >>> from unittest import mock
        >>> env = {'RANK': '3', 'WORLD_SIZE': '4', 'LOCAL_RANK': '1', 'LOCAL_WORLD_SIZE': '2'}  # as torchrun sets
        >>> with mock.patch.dict(os.environ, env):
        ...     f'cuda:{get_local_rank()}'
        'cuda:1'
    """
    return get_world_info().local_rank


def get_local_world_size() -> int:
    """The number of processes on this machine.

    Returns:
        A positive int (1 when run without torchrun).

    Example:
        >>> import os
        >>> from unittest import mock
        >>> env = {'RANK': '1', 'WORLD_SIZE': '4', 'LOCAL_RANK': '1', 'LOCAL_WORLD_SIZE': '2'}  # as torchrun sets
        >>> with mock.patch.dict(os.environ, env):
        ...     get_local_world_size()
        2
    """
    return get_world_info().local_world_size


def get_worker_id(id: str | int | None = None) -> int:  # TorchOpt names the argument id
    """The RPC id (the rank) of a worker given by name or id; this worker's without argument.

    Args:
        id: a worker name (needs RPC running), a worker id (checked against the world size), or
            ``None`` for this worker (needs RPC running).

    Returns:
        The worker's id.

    Raises:
        RuntimeError: for a name, or for ``None``, when RPC is not running.
        ValueError: for an id outside the world.
        TypeError: for anything else.

    Example:
        >>> @auto_init_rpc()
        ... def main():  # a world of one worker, 'worker0'
        ...     return get_worker_id('worker0'), get_worker_id(0), get_worker_id()
        >>> main()
        (0, 0, 0)
    """
    if isinstance(id, bool):
        raise TypeError("get_worker_id: id must be a worker name or an int, got a bool")
    if isinstance(id, int):
        size = get_world_size()
        if not 0 <= id < size:
            raise ValueError(f"get_worker_id: worker id {id} is outside the world of {size}")
        return id
    if id is not None and not isinstance(id, str):
        raise TypeError(f"get_worker_id: id must be a worker name or an int, got "
                        f"{type(id).__name__}")
    _require_rpc("get_worker_id")
    return rpc.get_worker_info(id).id if id is not None else rpc.get_worker_info().id


def _rpc_running() -> bool:
    return rpc.is_available() and rpc.api._is_current_rpc_agent_set()


def _require_rpc(what: str) -> None:
    if not _rpc_running():
        raise RuntimeError(f"{what} needs torch.distributed.rpc to be running: decorate your "
                           f"entry point with diffopt.distributed.auto_init_rpc() (or call "
                           f"torch.distributed.rpc.init_rpc)")


def barrier(worker_names: Iterable[str] | None = None, *, timeout: float | None = None) -> None:
    """Block until every worker in ``worker_names`` (default: all) has reached the barrier.

    Args:
        worker_names: the workers to synchronize; each of them must call ``barrier`` with the
            same set.
        timeout: seconds to wait (default: wait as long as it takes).

    Raises:
        RuntimeError: if RPC is not running, or a worker is gone or too late.
        ValueError: if this worker is not in ``worker_names``.

    Example:
        >>> @auto_init_rpc()
        ... def main():  # a world of one: the barrier is passed at once
        ...     barrier(['worker0'], timeout=10)
        ...     return 'passed'
        >>> main()
        'passed'
    """
    _require_rpc("barrier")
    names = None if worker_names is None else set(worker_names)
    if names is not None and rpc.get_worker_info().name not in names:
        raise ValueError("barrier: this worker is not in worker_names")
    # torch's all-gather is the one synchronization RPC offers; unlike rpc.api._barrier it raises.
    if timeout is None:
        rpc.api._all_gather(None, names)
    else:
        rpc.api._all_gather(None, names, timeout=float(timeout))


def _free_local_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# Set when this worker has finished its part and entered shutdown; rank 0 polls it (see below).
_finished = threading.Event()


def _has_finished() -> bool:
    return _finished.is_set()


def _wait_for_peers(info: WorldInfo) -> None:
    """Rank 0: wait until every worker has finished, failing fast if one died.

    torch's graceful shutdown makes its leader wait, without a limit, for every other worker to
    arrive: a worker that died first would hang rank 0 forever. Polling each worker first (a
    cheap RPC served by its thread pool, even while its main thread is busy) turns a dead worker
    into an error within ``_PING_TIMEOUT_S`` while still letting a slow worker take its time.
    """
    me = rpc.get_worker_info().name
    pending = [w.name for w in rpc._get_current_rpc_agent().get_worker_infos() if w.name != me]
    while pending:
        futures = [(name, rpc.rpc_async(name, _has_finished, timeout=_PING_TIMEOUT_S))
                   for name in pending]
        still, gone = [], []
        for name, future in futures:
            try:
                if not future.wait():
                    still.append(name)
            except Exception:  # any failure means the worker cannot shut down with us
                gone.append(name)
        if gone:
            rpc.shutdown(graceful=False)
            raise RuntimeError(f"diffopt.distributed: worker(s) {', '.join(sorted(gone))} died "
                               f"or stopped answering before the end of the run")
        pending = still
        if pending:
            time.sleep(_POLL_INTERVAL_S)


def _shutdown(info: WorldInfo, graceful: bool) -> None:
    if not _rpc_running():
        return
    if not graceful:
        rpc.shutdown(graceful=False)
        return
    _finished.set()
    try:
        if info.rank == 0 and info.world_size > 1:
            _wait_for_peers(info)
            # Everyone is in shutdown now: what is left is quick, so bound it.
            rpc.shutdown(graceful=True, timeout=_FINAL_SHUTDOWN_TIMEOUT_S)
        else:
            rpc.shutdown(graceful=True)
    except RuntimeError as error:
        if "diffopt.distributed" in str(error):
            raise
        raise RuntimeError(f"diffopt.distributed: the graceful RPC shutdown of "
                           f"{info.worker_name} failed (another worker died or exited "
                           f"without shutting down): {error}") from error


# TensorPipe's shared-memory transport busy-polls a core for each connection; with few cores per
# worker (2 on CI) that spinning starves the workers themselves (measured in
# benchmarks/distributed: a one-worker MAML step took 69 ms of CPU over shm against 48 over TCP,
# the sequential step 42). TCP over loopback costs tens of microseconds more per message, nothing
# next to an inner loop, and is what TensorPipe uses between machines anyway.
_DEFAULT_TRANSPORTS = ("uv",)


def _default_backend_options(info: WorldInfo) -> Any:
    options = rpc.TensorPipeRpcBackendOptions(_transports=list(_DEFAULT_TRANSPORTS))
    if info.world_size == 1 and "MASTER_ADDR" not in os.environ:  # a world of one, no torchrun
        options.init_method = f"tcp://127.0.0.1:{_free_local_port()}"
    return options


def auto_init_rpc(worker_init_fn: Callable[[], None] | None = None,
                  worker_name_format: Callable[..., str] = default_worker_name_format, *,
                  backend: Any = None, rpc_backend_options: Any = None) -> Callable[[F], F]:
    """Decorator: start RPC from torchrun's environment, run the function, shut down cleanly.

    Every process runs the decorated function (usually ``main``); pair it with
    :func:`rank_zero_only` so that rank 0 drives the work while the other ranks only serve RPCs.
    On return, the workers shut down together (graceful); if the function raises, this worker
    shuts RPC down at once and re-raises, and the others fail as soon as they next talk to it
    instead of waiting forever.

    Args:
        worker_init_fn: called on every worker after RPC starts (seeding, device selection...).
        worker_name_format: called with keywords ``world_rank``, ``world_size``, ``local_rank``,
            ``local_world_size``; returns the worker's RPC name (default ``'worker{rank}'``).
        backend: an ``rpc.BackendType`` (default TensorPipe).
        rpc_backend_options: e.g. ``rpc.TensorPipeRpcBackendOptions(rpc_timeout=...)``. The
            default is TensorPipe's options with the TCP (``uv``) transport only (the
            shared-memory one busy-polls a core per connection) and, for a world of one without
            ``MASTER_ADDR``, a free loopback port.

    Returns:
        The decorator.

    Example:
        >>> @auto_init_rpc()
        ... def main():  # run without torchrun: a world of one worker
        ...     return get_world_info().worker_name, get_worker_id()
        >>> main()
        ('worker0', 0)
    """
    if not callable(worker_name_format):
        raise TypeError("auto_init_rpc: worker_name_format must be callable, e.g. "
                        "'worker{world_rank}'.format")
    if worker_init_fn is not None and not callable(worker_init_fn):
        raise TypeError("auto_init_rpc: worker_init_fn must be callable or None (did you write "
                        "@auto_init_rpc instead of @auto_init_rpc()?)")

    def decorator(func: F) -> F:
        @functools.wraps(func)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            global _worker_name_format
            if not rpc.is_available():
                raise RuntimeError("torch.distributed.rpc is not available in this PyTorch build")
            if _rpc_running():
                raise RuntimeError("auto_init_rpc: RPC is already running in this process")
            _worker_name_format = worker_name_format
            _finished.clear()  # a second run in the same process starts unfinished
            info = get_world_info()
            options = rpc_backend_options
            if options is None and backend in (None, rpc.BackendType.TENSORPIPE):
                options = _default_backend_options(info)
            rpc.init_rpc(info.worker_name, backend=backend, rank=info.rank,
                         world_size=info.world_size, rpc_backend_options=options)
            try:
                if worker_init_fn is not None:
                    worker_init_fn()
                result = func(*args, **kwargs)
            except BaseException:
                _shutdown(info, graceful=False)
                raise
            _shutdown(info, graceful=True)
            return result

        return _record_errors(wrapped)  # type: ignore[return-value]

    return decorator


def _record_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """torchrun's error recording (the failing worker's traceback in torchrun's summary)."""
    try:
        from torch.distributed.elastic.multiprocessing.errors import record
    except ImportError:  # pragma: no cover - stripped-down torch builds
        return func
    return record(func)


def _on_ranks(ranks: Iterable[int], inverse: bool) -> Callable[[F], F]:
    wanted = frozenset(ranks)
    for rank in wanted:
        if isinstance(rank, bool) or not isinstance(rank, int) or rank < 0:
            raise TypeError(f"ranks must be non-negative ints, got {rank!r}")

    def decorator(func: F) -> F:
        @functools.wraps(func)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            if (get_world_rank() in wanted) != inverse:
                return func(*args, **kwargs)
            return None

        return wrapped  # type: ignore[return-value]

    return decorator


def on_rank(*ranks: int) -> Callable[[F], F]:
    """Decorator: run the function only on the given ranks (elsewhere it returns ``None``).

    Args:
        *ranks: the global ranks that run the function.

    Returns:
        The decorator.

    Raises:
        TypeError: if a rank is not a non-negative int.

    Example:
        >>> import os
        >>> from unittest import mock
        >>> @on_rank(0, 2)
        ... def log(message):
        ...     return f'rank {get_world_rank()}: {message}'
        >>> for rank in range(3):
        ...     with mock.patch.dict(os.environ, {'RANK': str(rank), 'WORLD_SIZE': '3'}):
        ...         print(log('hello'))
        rank 0: hello
        None
        rank 2: hello
    """
    return _on_ranks(ranks, inverse=False)


def not_on_rank(*ranks: int) -> Callable[[F], F]:
    """Decorator: run the function on every rank except the given ones (there it returns ``None``).

    Args:
        *ranks: the global ranks that skip the function.

    Returns:
        The decorator.

    Raises:
        TypeError: if a rank is not a non-negative int.

    Example:
        >>> import os
        >>> from unittest import mock
        >>> @not_on_rank(1)
        ... def work():
        ...     return get_world_rank()
        >>> results = []
        >>> for rank in range(3):
        ...     with mock.patch.dict(os.environ, {'RANK': str(rank), 'WORLD_SIZE': '3'}):
        ...         results.append(work())
        >>> results
        [0, None, 2]
    """
    return _on_ranks(ranks, inverse=True)


def rank_zero_only(func: F) -> F:
    """Decorator: run only on rank 0 (logging, checkpoints, the outer training loop).

    Args:
        func: the function to guard; on other ranks calling it does nothing and returns ``None``.

    Returns:
        The wrapped function.

    Example:
        >>> import os
        >>> from unittest import mock
        >>> @rank_zero_only
        ... def save():
        ...     return 'saved'
        >>> results = []
        >>> for rank in range(2):
        ...     with mock.patch.dict(os.environ, {'RANK': str(rank), 'WORLD_SIZE': '2'}):
        ...         results.append(save())
        >>> results
        ['saved', None]
    """
    return on_rank(0)(func)


def rank_non_zero_only(func: F) -> F:
    """Decorator: run everywhere but on rank 0 (there it returns ``None``).

    Args:
        func: the function to guard.

    Returns:
        The wrapped function.

    Example:
        >>> import os
        >>> from unittest import mock
        >>> @rank_non_zero_only
        ... def serve():
        ...     return 'serving'
        >>> results = []
        >>> for rank in range(2):
        ...     with mock.patch.dict(os.environ, {'RANK': str(rank), 'WORLD_SIZE': '2'}):
        ...         results.append(serve())
        >>> results
        [None, 'serving']
    """
    return not_on_rank(0)(func)
