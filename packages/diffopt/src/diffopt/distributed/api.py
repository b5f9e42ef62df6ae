"""Remote calls in the MapReduce style: partition the arguments, map on workers, reduce.

:func:`remote_async_call` splits one call into per-worker calls with a partitioner, sends them
with ``torch.distributed.rpc.rpc_async`` (so, inside a :func:`diffopt.distributed.autograd.context`,
gradients flow back through them) and combines the results with a reducer. The
``parallelize*`` decorators make a function do this whenever it is called.

Calls that a partitioner deals to the same worker travel together: one RPC per worker carries
all of them, runs them there one after the other in the partition's order, and brings their
results back in one reply (:func:`_run_calls`); the reducer still sees one result per call, in
the partition's order. Each call still owns its arguments, as if it had come alone: a tensor
several calls share (say, inside a module sent by value) travels once, and every call after the
first gets a private copy of it, attached to the caller's graph where the original is. An
exclusive partition of many small tasks (TorchOpt's ``dim_partitioner(0, exclusive=True,
keepdim=False)``) therefore costs one message, one transfer of the shared tensors and one
distributed-autograd send/receive pair per worker, not per task. The calls dealt to one worker
run one after the other (not side by side in its RPC thread pool), and ``timeout`` bounds the
worker's whole share.

A synchronous call (:func:`remote_sync_call`, :func:`parallelize`) without an explicit
``timeout`` runs the caller's own share in the caller's thread while the other workers compute,
instead of sending a message to itself: on copies of its arguments delivered as a message would
deliver them (tensors that require grad attached to the caller's graph inside a distributed
autograd context, ``nn.Parameter`` detached, grad mode on) and with its results copied back, so
it computes the same as through RPC, minus one message and one distributed-autograd send/receive
pair per step. (Rank 0 drives training and is a worker too, so this is its share of every step.)

An ``RRef`` to an ``nn.Module`` that the caller owns (TorchOpt's pattern sends
``RRef(module_clone(net, by='copy'))``, and each worker calls ``to_here()``) travels with the
call: the message to each other worker also carries the module (pickled like the arguments, its
tensors recorded by distributed autograd like theirs), and on the worker each call's first
``to_here()`` returns its own copy of it instead of fetching one, a round trip to a caller busy
with its own share. The function still
receives the RRef in every other respect (``isinstance``, ``owner()``, its remote methods; a
later ``to_here()`` fetches as ever; sent on, it is the RRef). The copy is the module as it was
when the call was made, which a fetch at that moment would have returned; a module that does
not pickle is not pushed.

In the backward pass of a distributed autograd context, the node that sends a reply's gradient
back to its worker runs as soon as that gradient is complete (see :func:`_send_gradients_first`),
so the workers differentiate their shares while the caller differentiates its own.

Failures reach the caller, never a hang:

* an exception raised by the function on a worker is re-raised on the caller with its type, the
  worker's name and the worker's traceback;
* a worker that dies (or closes its connection) fails the call at once, and one that does not
  answer within ``timeout`` seconds (default: the RPC agent's, 60 s unless
  ``rpc_backend_options`` says otherwise) fails it then, both as :class:`RemoteCallError`.

Example:
    >>> import torch
    >>> from diffopt.distributed import auto_init_rpc, dim_partitioner, mean_reducer
    >>> @auto_init_rpc()
    ... def main():  # one call per row, dealt to the workers (here one), then averaged
    ...     rows = dim_partitioner(0, exclusive=True, keepdim=False)
    ...     matrix = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    ...     return remote_sync_call(torch.sum, args=(matrix,), partitioner=rows, reducer=mean_reducer)
    >>> main()  # the mean of the row sums 3, 7 and 11
    tensor(7.)
"""

from __future__ import annotations

import functools
import importlib
import io
import numbers
import pickle
import traceback
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import torch
import torch.distributed.rpc as rpc

import optree_core
from diffopt.distributed.partition import (
    TensorDimensionPartitioner,
    batch_partitioner,
    dim_partitioner,
)
from diffopt.distributed.reduce import mean_reducer, sum_reducer
from diffopt.distributed.world import _require_rpc, get_worker_id

# The partitioners and reducers are re-exported here because torchopt.distributed.api lists them.
__all__ = [
    "UNSET_RPC_TIMEOUT",
    "RemoteCallError",
    "TensorDimensionPartitioner",
    "batch_partitioner",
    "dim_partitioner",
    "mean_reducer",
    "parallelize",
    "parallelize_async",
    "parallelize_sync",
    "remote_async_call",
    "remote_sync_call",
    "sum_reducer",
]

T = TypeVar("T")

try:
    from torch.distributed.rpc.constants import UNSET_RPC_TIMEOUT
except ImportError:  # pragma: no cover - PyTorch built without distributed support
    UNSET_RPC_TIMEOUT = -1.0

_PARALLELIZED = "__diffopt_parallelized__"


class RemoteCallError(RuntimeError):
    """A remote call failed for a reason outside the called function.

    The worker died, closed its connection, or did not answer within the call's timeout. (An
    exception raised by the function itself reaches the caller with its own type instead.) It is a
    :class:`RuntimeError`; its message names the function, the worker and the cause.

    Example:
        >>> import time
        >>> from diffopt.distributed import auto_init_rpc
        >>> @auto_init_rpc()
        ... def main():  # a world of one worker; time.sleep overruns its 10 ms timeout
        ...     try:
        ...         remote_sync_call(time.sleep, args=(0.1,), partitioner=0, timeout=0.01)
        ...     except RemoteCallError as error:
        ...         return str(error).split(':')[0]
        >>> main()
        'sleep on worker 0 did not finish within 0.01 s'
    """


class _RemoteFunction:
    """A parallelized function sent by reference: on the worker it resolves to the function the
    decorator wrapped (sending the decorated name itself would make the worker call out again)."""

    def __init__(self, module: str, qualname: str) -> None:
        self.module = module
        self.qualname = qualname

    def resolve(self) -> Callable[..., Any]:
        target: Any = importlib.import_module(self.module)
        for part in self.qualname.split("."):
            target = getattr(target, part)
        while getattr(target, _PARALLELIZED, False):
            target = target.__wrapped__
        return target

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.resolve()(*args, **kwargs)

    def __repr__(self) -> str:
        return f"{self.module}.{self.qualname}"


def _describe(func: Any) -> str:
    if isinstance(func, _RemoteFunction):
        return repr(func)
    return getattr(func, "__qualname__", None) or repr(func)


def _check_timeout(timeout: Any) -> float:
    if timeout is None:
        return UNSET_RPC_TIMEOUT
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise TypeError(f"timeout must be a number of seconds, got {type(timeout).__name__}")
    timeout = float(timeout)
    if timeout <= 0 and timeout != UNSET_RPC_TIMEOUT:
        raise ValueError(f"timeout must be positive (seconds), got {timeout}")
    return timeout


def _calls(func: Any, args: Any, kwargs: Any, partitioner: Any) -> list[tuple[int, tuple, dict]]:
    if isinstance(partitioner, bool):
        raise TypeError("partitioner must be a worker id, a worker name or a partition function")
    if isinstance(partitioner, (int, str)):
        return [(get_worker_id(partitioner), args, kwargs)]
    if not callable(partitioner):
        raise TypeError(f"partitioner must be a worker id, a worker name or a partition "
                        f"function, got {type(partitioner).__name__}")
    calls = []
    for item in partitioner(*args, **kwargs):
        if not (isinstance(item, (tuple, list)) and len(item) == 3):
            raise ValueError(f"a partitioner must return (worker, args, kwargs) triplets, got "
                             f"{item!r:.80}")
        worker, worker_args, worker_kwargs = item
        calls.append((get_worker_id(worker), tuple(worker_args or ()), dict(worker_kwargs or {})))
    if not calls:
        raise ValueError(f"the partitioner returned no calls for {_describe(func)}")
    return calls


def _set_aside(position: int) -> Any:
    """Stands in a batched pickle for the object set aside at ``position``; only
    :class:`_ArgumentsUnpickler` resolves it."""
    raise RuntimeError("diffopt.distributed: a batched call's arguments were unpickled outside "
                       "diffopt.distributed")


class _ArgumentsPickler(pickle.Pickler):
    """Pickles one call's ``(args, kwargs)`` for a batched message, setting its tensors and RRefs
    aside: the message carries those itself, so RPC sends them its own way (distributed autograd
    records the tensors, ``nn.Parameter`` arrives detached, RRefs fork) and an object several
    calls share travels once. (A ``reducer_override``, which pickle consults only for objects of
    types it has no fast path for, rather than a ``persistent_id``, which it calls for every
    object: a module's many small dicts, strings and numbers cost half as much.)"""

    def __init__(self, file: io.BytesIO, aside: list[Any], positions: dict[int, int]) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.aside = aside
        self.positions = positions

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is OrderedDict:
            # A module holds a dozen (its hooks, mostly empty); pickle's own reduction of an
            # OrderedDict looks up the type's slots in Python every time.
            return OrderedDict, (), vars(obj) or None, None, iter(obj.items())
        if not isinstance(obj, (torch.Tensor, rpc.PyRRef)):
            return NotImplemented
        position = self.positions.get(id(obj))
        if position is None:
            position = self.positions[id(obj)] = len(self.aside)
            self.aside.append(obj)
        return _set_aside, (position,)


class _ArgumentsUnpickler(pickle.Unpickler):
    """Rebuilds one call's arguments from a batched message (or the caller's own share), handing
    each tensor set aside through ``deliver(position, tensor)`` (once per position within the call,
    so tied weights stay tied); RRefs pass as they are, except those whose module came with the
    message (``pushed``: its pickle, by position), which arrive as a :class:`_PushedRRef` holding
    this call's own copy of the module."""

    def __init__(self, data: bytes, aside: list[Any],
                 deliver: Callable[[int, torch.Tensor], torch.Tensor],
                 pushed: dict[int, bytes] | None = None) -> None:
        super().__init__(io.BytesIO(data))
        self.aside = aside
        self.deliver = deliver
        self.pushed = pushed or {}
        self.loaded: dict[int, Any] = {}

    def find_class(self, module: str, name: str) -> Any:
        if name == "_set_aside" and module == __name__:
            return self.set_aside
        return super().find_class(module, name)

    def set_aside(self, position: int) -> Any:
        if position not in self.loaded:
            obj = self.aside[position]
            if isinstance(obj, torch.Tensor):
                obj = self.deliver(position, obj)
            elif position in self.pushed:
                value = _ArgumentsUnpickler(self.pushed[position], self.aside, self.deliver).load()
                obj = _PushedRRef(obj, value)
            self.loaded[position] = obj
        return self.loaded[position]


_TAKEN = object()


def _same(obj: Any) -> Any:
    return obj


class _PushedRRef:
    """What a worker's function receives for an RRef to a module that the caller owns and sent
    along with the call (see this module's docstring): the RRef itself in every respect (its
    methods, ``isinstance``, sending it on), except that its first ``to_here()`` returns the
    call's copy of the module that came with the message instead of fetching one from the owner,
    a round trip while the owner is busy with its own share. Later calls fetch, as always."""

    __slots__ = ("_rref", "_value")

    def __init__(self, rref: Any, value: Any) -> None:
        self._rref = rref
        self._value = value

    # isinstance() sees the RRef's type; mypy forbids a read-only property over object's settable
    # __class__, which is what this proxy wants (assigning __class__ on it is never done).
    @property  # type: ignore[misc]
    def __class__(self):
        return type(self._rref)

    def to_here(self, *args: Any, **kwargs: Any) -> Any:
        value, self._value = self._value, _TAKEN
        return self._rref.to_here(*args, **kwargs) if value is _TAKEN else value

    def __getattr__(self, name: str) -> Any:
        return getattr(self._rref, name)

    def __reduce__(self):  # sent on, it is the RRef again
        return _same, (self._rref,)

    def __repr__(self) -> str:
        return repr(self._rref)


def _as_delivered(tensor: torch.Tensor, attach: bool) -> torch.Tensor:
    """A copy of ``tensor`` as an RPC message delivers it: an ``nn.Parameter`` as a detached
    Parameter (RPC rebuilds it from its data), a tensor that requires grad still attached to the
    sender's graph when distributed autograd records the message (``attach``), else detached with
    its ``requires_grad`` flag."""
    if isinstance(tensor, torch.nn.Parameter):
        return torch.nn.Parameter(tensor.detach().clone(), requires_grad=tensor.requires_grad)
    if attach and tensor.requires_grad:
        with torch.enable_grad():
            return tensor.clone()
    return tensor.detach().clone().requires_grad_(tensor.requires_grad)


def _first_as_received(handed: set[int]) -> Callable[[int, torch.Tensor], torch.Tensor]:
    """Delivery on a worker: a tensor as received the first time, a private copy (as a message
    of its own would have delivered it) to every later call of the batch."""

    def deliver(position: int, tensor: torch.Tensor) -> torch.Tensor:
        if position in handed:
            return _as_delivered(tensor, attach=tensor.grad_fn is not None)
        handed.add(position)
        return tensor

    return deliver


def _pushable(obj: Any) -> bool:
    """Whether ``obj`` is an RRef to a module this process owns, which a message pushes along."""
    return (isinstance(obj, rpc.PyRRef) and obj.is_owner()
            and isinstance(obj.local_value(), torch.nn.Module))


def _carries_pushable(call: tuple[tuple, dict]) -> bool:
    """Whether a call's arguments hold a :func:`_pushable` RRef among their pytree leaves (one
    hidden inside another object is only found by pickling, and such a call is sent as it is)."""
    return any(map(_pushable, optree_core.tree_leaves(call)))


def _pack_calls(calls: list[Any], push: bool = False) -> tuple[list[bytes], list[Any],
                                                                 dict[int, bytes]] | None:
    """The calls' arguments pickled one call at a time, what they set aside, and (``push``) the
    pickles of the modules behind the RRefs set aside that this worker owns, by position; ``None``
    when some argument does not pickle outside RPC's own pickler (those calls then go one by
    one). A module that does not pickle is simply not pushed."""
    aside: list[Any] = []
    positions: dict[int, int] = {}
    blobs = []
    for call in calls:
        buffer = io.BytesIO()
        try:
            _ArgumentsPickler(buffer, aside, positions).dump(call)
        except Exception:  # whatever RPC alone can pickle: these calls go unbatched
            return None
        blobs.append(buffer.getvalue())
    pushed: dict[int, bytes] = {}
    for position, obj in enumerate(list(aside) if push else ()):
        if not _pushable(obj):
            continue
        buffer, mark = io.BytesIO(), len(aside)
        try:
            _ArgumentsPickler(buffer, aside, positions).dump(obj.local_value())
        except Exception:  # the worker fetches it with to_here(), as it would have
            del aside[mark:]
            for key in [key for key, at in positions.items() if at >= mark]:
                del positions[key]
            continue
        pushed[position] = buffer.getvalue()
    return blobs, aside, pushed


def _run_calls(func: Callable[..., T], pushed: dict[int, bytes], blobs: list[bytes],
               aside: list[Any]) -> list[T]:
    """The worker's side of a batched call: ``func`` on each call's arguments, in order, each
    call with its own copy of the modules that came with the message."""
    deliver = _first_as_received(set())
    # Every call's arguments first, so the private copies are taken before any call can change
    # what it received.
    arguments = [_ArgumentsUnpickler(blob, aside, deliver, pushed).load() for blob in blobs]
    return [func(*args, **kwargs) for args, kwargs in arguments]


def _in_autograd_context() -> bool:
    import torch.distributed.autograd as dist_autograd

    try:
        dist_autograd._current_context()
    except RuntimeError:
        return False
    return True


def _run_here(func: Callable[..., Any], packed: tuple[list[bytes], list[Any], Any]) -> Any:
    """The caller's own share of a call, run in the caller's thread as its RPC thread would run
    it: on copies of the arguments delivered as a message delivers them, with grad mode on, and
    the results copied back as a reply. Saves the message to itself (pickling, TensorPipe, the
    distributed-autograd send/receive pair) while the other workers compute."""
    blobs, aside, _ = packed
    attach = torch.is_grad_enabled() and _in_autograd_context()
    future: torch.futures.Future = torch.futures.Future()
    try:
        with torch.inference_mode(False), torch.enable_grad():
            deliver = lambda _, tensor: _as_delivered(tensor, attach)  # noqa: E731
            arguments = [_ArgumentsUnpickler(blob, aside, deliver).load() for blob in blobs]
            results = [func(*args, **kwargs) for args, kwargs in arguments]
            reply = _pack_calls([results])
            if reply is None:
                raise TypeError(f"{_describe(func)} returned something that cannot be pickled "
                                f"(RPC could not have sent it back either)")
            (values,) = [_ArgumentsUnpickler(blob, reply[1], deliver).load() for blob in reply[0]]
    except Exception as error:  # reaches the caller like a worker's exception
        future.set_exception(_as_worker_error(error))
    else:
        future.set_result(values)
    return future


def _as_worker_error(error: Exception) -> Exception:
    """``error`` dressed as RPC dresses a worker's exception: same type, the worker named, the
    traceback in the message."""
    message = (f"On {rpc.get_worker_info()}:\n{error!r}\n"
               + "".join(traceback.format_exception(error)))
    try:
        dressed = type(error)(message)
    except Exception:  # a type whose constructor does not take one message
        dressed = RuntimeError(message)
    dressed.__cause__ = error
    return dressed


# torch's autograd engine runs the ready nodes of a backward pass highest sequence number first
# (numbers count up per thread, so later work first), giving AccumulateGrad the top number. The
# RecvRpcBackward node that distributed autograd attaches to a reply is created on the RPC thread
# that received it, whose numbers are low: without help it runs only after every other ready node,
# that is after the caller's whole local branch (its own share of the call included), so a
# worker's backward pass starts when the caller's has finished instead of beside it (measured in
# benchmarks/RESULTS.md, "diffopt (distributed)"). The node only sends the gradient to the worker
# and returns at once, so it gets the top number too: it still runs only once all its gradient
# has arrived (the engine's dependency count), and the gradients are unchanged; only the order of
# otherwise independent nodes changes.
_RECV_NODE = "torch::distributed::autograd::RecvRpcBackward"
_FIRST = 2**64 - 1


def _send_gradients_first(value: Any) -> None:
    """Give the nodes that send a reply's gradients back to its worker the top priority."""
    for leaf in optree_core.tree_leaves(value):
        node = leaf.grad_fn if isinstance(leaf, torch.Tensor) else None
        if node is not None and node.name() == _RECV_NODE and hasattr(node, "_set_sequence_nr"):
            node._set_sequence_nr(_FIRST)


def _by_worker(calls: list[tuple[int, tuple, dict]]) -> dict[int, list[int]]:
    """The indices of the calls dealt to each worker, workers in order of first appearance."""
    groups: dict[int, list[int]] = {}
    for index, (worker, _, _) in enumerate(calls):
        groups.setdefault(worker, []).append(index)
    return groups


def _explain(func: Any, worker: int, error: BaseException, timeout: float) -> BaseException:
    """The exception the caller sees for one failed call."""
    message = str(error)
    if "On WorkerInfo(" in message:  # raised by the function itself: keep its type and traceback
        if hasattr(error, "add_note"):
            error.add_note(f"(raised by {_describe(func)} on worker {worker})")
        return error
    if "timeout" in message.lower() or "timed out" in message.lower():
        limit = "the RPC agent's default timeout" if timeout == UNSET_RPC_TIMEOUT \
            else f"{timeout:g} s"
        wrapped = RemoteCallError(f"{_describe(func)} on worker {worker} did not finish within "
                                  f"{limit}: the worker is stuck, overloaded or gone "
                                  f"({message.strip()})")
    else:
        wrapped = RemoteCallError(f"{_describe(func)} on worker {worker} failed: the worker "
                                  f"died or closed its connection ({message.strip()})")
    wrapped.__cause__ = error
    return wrapped


def remote_async_call(func: Callable[..., T], *, args: tuple | None = None,
                      kwargs: dict | None = None, partitioner: Any = None,
                      reducer: Callable[[Iterable[T]], Any] | None = None,
                      timeout: float | None = UNSET_RPC_TIMEOUT,
                      _run_own_share_here: bool = False) -> torch.futures.Future:
    """Run ``func`` on remote workers and return a :class:`torch.futures.Future` of the result.

    Args:
        func: a picklable function (module-level: RPC sends functions by reference).
        args: positional arguments of the whole call.
        kwargs: keyword arguments of the whole call.
        partitioner: a worker id or name (one call there), or a partition function returning
            ``(worker, args, kwargs)`` triplets (default :data:`batch_partitioner`).
        reducer: combines the list of results (default: none, the future holds the list).
        timeout: seconds each worker's share of the call may take (default: the RPC agent's).

    Returns:
        A future; ``.wait()`` gives the (reduced) result or raises the first failure.

    Raises:
        RuntimeError: if RPC is not running.
        TypeError: if ``func`` cannot be sent by reference.

    Example:
        >>> import torch
        >>> from diffopt.distributed import auto_init_rpc
        >>> @auto_init_rpc()
        ... def main():  # a world of one worker, 'worker0'
        ...     future = remote_async_call(torch.mul, args=(torch.tensor([1.0, 2.0]), 3.0), partitioner=0)
        ...     return future.wait()
        >>> main()  # one result per call, in a list (no reducer)
        [tensor([3., 6.])]
    """
    _require_rpc("remote_async_call")
    if not callable(func):
        raise TypeError(f"func must be callable, got {type(func).__name__}")
    if getattr(func, _PARALLELIZED, False):  # send what the decorator wrapped, not the wrapper
        func = func.__diffopt_remote__
    args = () if args is None else tuple(args)
    kwargs = {} if kwargs is None else dict(kwargs)
    timeout = _check_timeout(timeout)
    calls = _calls(func, args, kwargs, batch_partitioner if partitioner is None else partitioner)

    # The caller's own share runs here (synchronous calls without a timeout to enforce: see
    # _run_here), after the other workers' messages are sent.
    me = rpc.get_worker_info().id
    own = me if _run_own_share_here and timeout == UNSET_RPC_TIMEOUT else None
    here: tuple[int, list[int], Any] | None = None
    # One message per worker (see the module's docstring); (worker, call indices, payload).
    # Another worker's message also carries the modules behind the caller's own RRefs (pushed;
    # not in a message to itself, where to_here() returns the module itself, not a copy).
    messages: list[tuple[int, list[int], tuple[Callable[..., Any], tuple, dict]]] = []
    for worker, indices in _by_worker(calls).items():
        # Packed where the package is used: several calls in one message, the own share, or a
        # single call that pushes a module; any other single call goes as it is (RPC pickles it).
        push = worker != me
        batched = (len(indices) > 1 or worker == own
                   or (push and _carries_pushable(calls[indices[0]][1:])))
        packed = _pack_calls([calls[i][1:] for i in indices], push=push) if batched else None
        if packed is not None and worker == own:
            here = (worker, indices, packed)
        elif packed is not None and (len(indices) > 1 or packed[2]):
            blobs, aside, pushed = packed
            messages.append((worker, indices, (_run_calls, (func, pushed, blobs, aside), {})))
        else:
            messages.extend((worker, [i], (func, *calls[i][1:])) for i in indices)

    futures = []
    for worker, indices, (target, send_args, send_kwargs) in messages:
        try:
            future = rpc.rpc_async(worker, target, args=send_args, kwargs=send_kwargs,
                                   timeout=timeout)
        except (pickle.PicklingError, AttributeError, TypeError) as error:
            if "pickle" not in str(error).lower():
                raise
            raise TypeError(f"cannot send {_describe(func)} or its arguments to worker {worker}: "
                            f"RPC pickles functions by reference, so use a module-level function "
                            f"(not a lambda or a nested function) ({error})") from error
        futures.append((worker, indices, future, target is _run_calls))
    if here is not None:
        worker, indices, packed = here
        futures.append((worker, indices, _run_here(func, packed), True))

    futures.sort(key=lambda entry: entry[1][0])  # failures reported in the partition's order
    result: torch.futures.Future = torch.futures.Future()

    def finish(_: torch.futures.Future) -> None:
        values: list[Any] = [None] * len(calls)
        for worker, indices, future, listed in futures:
            try:
                value = future.wait()
            except Exception as error:  # handed to the caller through the future
                result.set_exception(_explain(func, worker, error, timeout))
                return
            _send_gradients_first(value)
            for index, item in zip(indices, value if listed else [value]):
                values[index] = item
        try:
            result.set_result(values if reducer is None else reducer(values))
        except Exception as error:  # a failing reducer fails the call
            result.set_exception(error)

    torch.futures.collect_all([entry[2] for entry in futures]).add_done_callback(finish)
    return result


def remote_sync_call(func: Callable[..., T], *, args: tuple | None = None,
                     kwargs: dict | None = None, partitioner: Any = None,
                     reducer: Callable[[Iterable[T]], Any] | None = None,
                     timeout: float | None = UNSET_RPC_TIMEOUT) -> Any:
    """:func:`remote_async_call` and wait for its result.

    Args:
        func: a picklable function (module-level: RPC sends functions by reference).
        args: positional arguments of the whole call.
        kwargs: keyword arguments of the whole call.
        partitioner: a worker id or name, or a partition function (default
            :data:`batch_partitioner`: the tensors' first dimension is split among the workers).
        reducer: combines the list of results (default: none, the list is returned).
        timeout: seconds each worker's share of the call may take (default: the RPC agent's).

    Returns:
        The (reduced) result.

    Raises:
        RuntimeError: if RPC is not running, or the remote function raised (its own exception type
            is kept when it is a standard one).
        RemoteCallError: if a worker died or did not answer in time.

    Example:
        >>> import torch
        >>> from diffopt.distributed import auto_init_rpc, sum_reducer
        >>> @auto_init_rpc()
        ... def main():  # each worker sums its block of the batch; the reducer adds the sums
        ...     return remote_sync_call(torch.sum, args=(torch.arange(6.0),), reducer=sum_reducer)
        >>> main()
        tensor(15.)
    """
    return remote_async_call(func, args=args, kwargs=kwargs, partitioner=partitioner,
                             reducer=reducer, timeout=timeout, _run_own_share_here=True).wait()


def _parallelizer(partitioner: Any, reducer: Any, timeout: Any, wait: bool):
    if partitioner is None:
        partitioner = batch_partitioner
        if reducer is None:
            reducer = mean_reducer
    timeout = _check_timeout(timeout)

    def decorator(func: Callable[..., T]) -> Callable[..., Any]:
        qualname = getattr(func, "__qualname__", "")
        if "<locals>" in qualname or "<lambda>" in qualname or not hasattr(func, "__module__"):
            raise TypeError(f"parallelize needs a module-level function (RPC sends functions by "
                            f"reference), got {qualname or func!r}")
        remote = _RemoteFunction(func.__module__, qualname)

        @functools.wraps(func)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            future = remote_async_call(remote, args=args, kwargs=kwargs, partitioner=partitioner,
                                       reducer=reducer, timeout=timeout, _run_own_share_here=wait)
            return future.wait() if wait else future

        setattr(wrapped, _PARALLELIZED, True)
        wrapped.__diffopt_remote__ = remote  # type: ignore[attr-defined]
        return wrapped

    return decorator


def parallelize_async(partitioner: Any = None,
                      reducer: Callable[[Iterable[Any]], Any] | None = None,
                      timeout: float | None = UNSET_RPC_TIMEOUT) -> Callable[..., Any]:
    """Decorator: calling the function runs it on remote workers and returns a future.

    Args:
        partitioner: as in :func:`remote_async_call`; default :data:`batch_partitioner`, and then
            the default reducer is :func:`mean_reducer`.
        reducer: as in :func:`remote_async_call`.
        timeout: seconds each worker's share of the call may take.

    Returns:
        The decorator. The function must be defined at module level.

    Raises:
        TypeError: (from the decorator) for a lambda or a nested function.

    Example:
        >>> import torch
        >>> from diffopt.distributed import auto_init_rpc, sum_reducer
        >>> from diffopt.tree_math import tree_sum
        >>> remote_sum = parallelize_async(reducer=sum_reducer)(tree_sum)
        >>> @auto_init_rpc()
        ... def main():
        ...     future = remote_sum(torch.arange(4.0))
        ...     return future.wait()
        >>> main()
        tensor(6.)
    """
    return _parallelizer(partitioner, reducer, timeout, wait=False)


def parallelize_sync(partitioner: Any = None,
                     reducer: Callable[[Iterable[Any]], Any] | None = None,
                     timeout: float | None = UNSET_RPC_TIMEOUT) -> Callable[..., Any]:
    """Decorator: calling the function runs it on remote workers and returns the result.

    Also exported as ``parallelize``.

    Args:
        partitioner: as in :func:`remote_async_call`; default :data:`batch_partitioner`, and then
            the default reducer is :func:`mean_reducer`.
        reducer: as in :func:`remote_async_call`.
        timeout: seconds each worker's share of the call may take.

    Returns:
        The decorator. The function must be defined at module level.

    Raises:
        TypeError: (from the decorator) for a lambda or a nested function.

    Example:
        >>> import torch
        >>> from diffopt.distributed import auto_init_rpc, sum_reducer
        >>> from diffopt.tree_math import tree_sum
        >>> remote_sum = parallelize_sync(reducer=sum_reducer)(tree_sum)
        >>> @auto_init_rpc()
        ... def main():  # the batch is split among the workers (here one)
        ...     return remote_sum(torch.arange(6.0))
        >>> main()
        tensor(15.)
    """
    return _parallelizer(partitioner, reducer, timeout, wait=True)


parallelize = parallelize_sync
