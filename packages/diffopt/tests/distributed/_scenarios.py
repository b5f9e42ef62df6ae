"""Multi-process scenarios for the distributed tests, one process per rank.

Run as ``python _scenarios.py <scenario> <result.json>`` with torchrun's environment variables
(``launch`` in ``test_distributed.py`` sets them). Every rank runs the scenario under
``auto_init_rpc``; rank 0 drives it and writes what it measured to ``result.json``. Functions
called remotely live at module level here: RPC sends functions by reference and every rank runs
this same file as ``__main__``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F

import diffopt
import diffopt.distributed as todist

torch.set_num_threads(1)
torch.set_default_dtype(torch.float64)


def make_net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(1, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))


def make_tasks(n_tasks: int = 5, k: int = 6):
    generator = torch.Generator().manual_seed(1)
    amplitude = 0.5 + torch.rand(n_tasks, 1, 1, generator=generator)
    phase = torch.rand(n_tasks, 1, 1, generator=generator)
    x = 4 * torch.rand(n_tasks, 2 * k, 1, generator=generator) - 2
    return x, amplitude * torch.sin(x + phase)


def inner_loop(net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, algo: str = "sgd"):
    """Adapt ``net`` on the first half of one task's points, return the loss on the rest."""
    k = x.shape[0] // 2
    if algo == "sgd":
        inner = diffopt.MetaSGD(net, lr=0.1)
    else:
        inner = diffopt.MetaAdam(net, lr=0.05, use_accelerated_op=(algo == "fused_adam"))
    for _ in range(2):
        inner.step(F.mse_loss(net(x[:k]), y[:k]))
    return F.mse_loss(net(x[k:]), y[k:])


@todist.parallelize(partitioner=todist.dim_partitioner(0, exclusive=True, keepdim=False),
                    reducer=todist.mean_reducer)
def parallel_inner_loop(net, x, y):
    return inner_loop(net, x, y)


@todist.parallelize()
def batch_sum_and_rank(x):
    """Default partitioner/reducer: a block of rows per worker, results averaged."""
    return x.sum() * 0 + todist.get_world_rank(), x.sum()


def inner_loops_from_rref(net_rref, x, y):
    """TorchOpt's documented worker function: the module behind an RRef, then a block of tasks
    (each on a reference clone with detached buffers); the block's mean query loss."""
    net = net_rref.to_here()
    return torch.stack([inner_loop(diffopt.module_clone(net, by="reference", detach_buffers=True),
                                   x[i], y[i]) for i in range(x.shape[0])]).mean()


def inner_loop_from_rref(net_rref, x, y):
    """TorchOpt's example's worker function: one task, the module fetched from the RRef."""
    net = diffopt.module_clone(net_rref.to_here(), by="reference", detach_buffers=True)
    return inner_loop(net, x, y)


def adapt_shared_module(net, x):
    """Who ran the call, whether it came in a batched message, what it saw of the module every
    call shares; then it changes that module in place (later calls must not see it)."""
    batched = any(frame.name == "_run_calls" for frame in traceback.extract_stack())
    seen = float(net.weight.detach().sum())
    with torch.no_grad():
        net.weight.add_(1.0)
    return todist.get_world_rank(), batched, seen, float(x.sum())


def describe_arguments(tensors, scale):
    """What a call received (type, requires_grad, is_leaf, attached), who ran it, in what grad
    mode; then it changes its arguments in place (the caller's must not change)."""
    seen = [(type(t).__name__, t.requires_grad, t.is_leaf, t.grad_fn is not None)
            for t in tensors["args"]]
    out = (todist.get_world_rank(), torch.is_grad_enabled(), seen,
           tensors["args"][0] * scale)  # a result attached to the received tensor
    with torch.no_grad():
        for t in tensors["args"]:
            t.add_(1.0)
    return out


def rows_and_rank(x):
    return todist.get_world_rank(), x.shape[0], x.sum()


def square(w):
    return w * w


PICKLED_IN_MAIN_THREAD: list[bool] = []


class RecordedLinear(torch.nn.Linear):
    """A module that notes which thread of its process pickles it."""

    def __getstate__(self):
        PICKLED_IN_MAIN_THREAD.append(threading.current_thread() is threading.main_thread())
        return super().__getstate__()


def weight_sum_from_rref(rref):
    return float(rref.to_here().weight.detach().sum())


def sum_from_rref(rref):
    return float(rref.to_here().sum())


def owner_of_rref(rref):
    return rref.owner().name


def bump_and_sum(rref):
    module = rref.to_here()
    with torch.no_grad():
        module.weight.add_(1.0)
    return float(module.weight.detach().sum())


def use_module_rref(rref, x):
    """What a worker sees of an RRef to the caller's module: the RRef (type, owner), its module
    twice (to_here() twice: two copies), and the RRef sent on to worker 2."""
    first, second = rref.to_here(), rref.to_here()
    with torch.no_grad():
        first.weight.add_(1.0)  # a copy: the owner's module and the second copy keep theirs
    return {"is_rref": isinstance(rref, todist.rpc.PyRRef), "owner": rref.owner().name,
            "is_owner": rref.is_owner(), "first": float(first.weight.detach().sum()),
            "second": float(second.weight.detach().sum()),
            "sent_on": todist.rpc.rpc_sync(2, weight_sum_from_rref, args=(rref,)),
            "value": float((first(x) + second(x)).sum())}


def chain_of_squares(x):
    for _ in range(3):
        x = x * x
    return x.sum()


def world_report():
    info = todist.get_world_info()

    @todist.rank_zero_only
    def zero():
        return "zero"

    @todist.rank_non_zero_only
    def non_zero():
        return "non-zero"

    @todist.on_rank(1, 2)
    def one_or_two():
        return "1|2"

    @todist.not_on_rank(1)
    def not_one():
        return "!1"

    return {"rank": info.rank, "world_size": info.world_size, "name": info.worker_name,
            "id": todist.get_worker_id(), "by_name": todist.get_worker_id(info.worker_name),
            "local_rank": todist.get_local_rank(),
            "local_world_size": todist.get_local_world_size(),
            "decorated": [zero(), non_zero(), one_or_two(), not_one()]}


def failing_task(x):
    def deep_inside(value):
        raise ValueError(f"task went wrong on purpose ({value})")

    return deep_inside(float(x.sum()))


def sleepy(seconds):
    time.sleep(seconds)
    return seconds


def started_then_sleep(marker, seconds):
    Path(marker).write_text(str(os.getpid()))
    time.sleep(seconds)
    return seconds


def meta_gradient_distributed(net, x, y, algo):
    params = tuple(net.parameters())
    with todist.autograd.context() as context_id:
        loss = todist.remote_sync_call(
            inner_loop, args=(diffopt.module_clone(net, by="clone"), x, y), kwargs={"algo": algo},
            partitioner=todist.dim_partitioner(0, exclusive=True, keepdim=False),
            reducer=todist.mean_reducer)
        grads = todist.autograd.grad(context_id, loss, params)
    return loss.detach(), grads


def meta_gradient_local(net, x, y, algo):
    params = tuple(net.parameters())
    losses = [inner_loop(diffopt.module_clone(net, by="clone"), x[i], y[i], algo)
              for i in range(x.shape[0])]
    loss = torch.stack(losses).mean()
    return loss.detach(), torch.autograd.grad(loss, params)


def max_diff(a, b):
    return max(float((u - v).abs().max()) for u, v in zip(a, b))


def scenario_maml(out: dict) -> None:
    net, (x, y) = make_net(), make_tasks()
    for algo in ("sgd", "adam", "fused_adam"):
        if algo == "fused_adam" and not diffopt.accelerated_op_available("cpu"):
            continue
        local_loss, local = meta_gradient_local(net, x, y, algo)
        dist_loss, dist = meta_gradient_distributed(net, x, y, algo)
        out[f"maml_{algo}"] = {"loss_diff": abs(float(local_loss - dist_loss)),
                               "grad_diff": max_diff(local, dist),
                               "grad_norm": max(float(g.abs().max()) for g in local)}

    # The parallelize decorator, and backward() accumulating into .grad (twice: 2x).
    params = tuple(net.parameters())
    _, local = meta_gradient_local(net, x, y, "sgd")
    with todist.autograd.context() as context_id:
        loss = parallel_inner_loop(diffopt.module_clone(net, by="clone"), x, y)
        todist.autograd.backward(context_id, loss, retain_graph=True)
        once = [p.grad.clone() for p in params]
        todist.autograd.backward(context_id, loss)
    out["parallelize_grad_diff"] = max_diff(local, once)
    out["backward_twice_diff"] = max_diff([2 * g for g in local], [p.grad for p in params])

    # autograd.grad's torch.autograd.grad manners, across a worker: a vector-Jacobian product,
    # retain_graph in TorchOpt's positional slot, unused inputs, and the errors.
    w = torch.tensor([1.0, -2.0, 3.0], requires_grad=True)
    unused = torch.zeros(1, requires_grad=True)
    checks = {}
    with todist.autograd.context() as context_id:
        squared = todist.remote_sync_call(square, args=(w.clone(),), partitioner=1)[0]
        (vjp,) = todist.autograd.grad(context_id, squared, w, True,
                                      grad_outputs=torch.tensor([1.0, 10.0, 100.0]))
        checks["vjp"] = vjp.tolist()  # 2 w * v
        again, none = todist.autograd.grad(context_id, squared.sum(), (w, unused), True, True)
        checks["again"], checks["unused"] = again.tolist(), none
        for name, call in (
                ("not_scalar", lambda: todist.autograd.grad(context_id, squared, w)),
                ("unused_error", lambda: todist.autograd.grad(context_id, squared.sum(),
                                                              (w, unused), True)),
                ("not_leaf", lambda: todist.autograd.grad(context_id, squared.sum(), w * 1))):
            try:
                call()
            except (ValueError, RuntimeError) as error:
                checks[name] = f"{type(error).__name__}: {error}"
    out["autograd"] = checks

    # Who ran what: exclusive dealing is round-robin; batch blocks are contiguous and balanced.
    ranks = todist.remote_sync_call(
        rows_and_rank, args=(torch.arange(5.0).reshape(5, 1),),
        partitioner=todist.dim_partitioner(0, exclusive=True))
    out["exclusive_ranks"] = [r for r, _, _ in ranks]
    blocks = todist.remote_sync_call(rows_and_rank, args=(torch.arange(5.0).reshape(5, 1),))
    out["batch_blocks"] = [[r, n, float(s)] for r, n, s in blocks]
    future = todist.remote_async_call(rows_and_rank, args=(torch.ones(7, 2),), partitioner=2,
                                      reducer=lambda results: results[0][1])
    out["async_single_worker"] = future.wait()
    out["default_parallelize"] = [float(v) for v in batch_sum_and_rank(torch.arange(6.0))]
    out["world"] = [todist.remote_sync_call(world_report, partitioner=rank)[0]
                    for rank in range(todist.get_world_size())]
    out["world_by_name"] = todist.remote_sync_call(world_report, partitioner="worker2")[0]["rank"]

    # TorchOpt's documented pattern (module as an RRef, one block per worker, mean_reducer) and
    # its example's (one task per call, many per worker, sent as one message per worker): the
    # same meta-gradient as the single process.
    # (mean_reducer averages the blocks' means: 6 tasks make equal blocks of 2 on 3 workers; the
    # exclusive partition deals 5 tasks as 2, 2 and 1 calls.)
    x6, y6 = make_tasks(6)
    patterns = {"rref_blocks": (inner_loops_from_rref, (x6, y6),
                                todist.dim_partitioner(0, exclusive=False, keepdim=True)),
                "rref_tasks": (inner_loop_from_rref, (x, y),
                               todist.dim_partitioner(0, exclusive=True, keepdim=False))}
    for name, (func, (xs, ys), partitioner) in patterns.items():
        _, local = meta_gradient_local(net, xs, ys, "sgd")
        net_rref = todist.rpc.RRef(diffopt.module_clone(net, by="copy"))
        with todist.autograd.context() as context_id:
            loss = todist.remote_sync_call(func, args=(net_rref, xs, ys),
                                           partitioner=partitioner, reducer=todist.mean_reducer)
            grads = todist.autograd.grad(context_id, loss, params)
        out[f"{name}_grad_diff"] = max_diff(local, grads)
    # Calls dealt to one worker travel as one message, each call owning its arguments, and the
    # results come back in the partition's order.
    shared = torch.nn.Linear(3, 3)
    sent = []
    rpc_async = todist.rpc.rpc_async

    def counting_rpc_async(to, func, *args, **kwargs):
        sent.append(to)
        return rpc_async(to, func, *args, **kwargs)

    todist.rpc.rpc_async = counting_rpc_async
    try:
        out["batched_calls"] = todist.remote_sync_call(
            adapt_shared_module, args=(shared, torch.arange(7.0)),
            partitioner=todist.dim_partitioner(0, exclusive=True, keepdim=False))
    finally:
        todist.rpc.rpc_async = rpc_async
    out["batched_messages"] = sent
    out["batched_weight_sum"] = float(shared.weight.sum())

    # The caller's own share (worker 0, run here) receives what a message delivers to worker 1,
    # in and out of a distributed autograd context, and changing it leaves the caller's alone.
    leaf = torch.tensor([1.0, 2.0], requires_grad=True)
    param = torch.nn.Parameter(torch.tensor([3.0, 4.0]))
    plain = torch.tensor([5.0, 6.0])
    deliveries = {}
    for label in ("context", "no_context", "no_grad"):
        arguments = ({"args": [leaf * 1.0, leaf, param, plain]}, 2.0)  # a non-leaf first

        def both(*args, **kwargs):  # the same arguments to worker 0 (here) and worker 1
            return [(0, args, kwargs), (1, args, kwargs)]

        if label == "context":
            with todist.autograd.context() as context_id:
                got = todist.remote_sync_call(describe_arguments, args=arguments,
                                              partitioner=both)
                (grad,) = todist.autograd.grad(context_id, sum(g[3].sum() for g in got), leaf)
                deliveries["grad_through_both"] = grad.tolist()
        elif label == "no_context":
            got = todist.remote_sync_call(describe_arguments, args=arguments, partitioner=both)
        else:
            with torch.no_grad():
                got = todist.remote_sync_call(describe_arguments, args=arguments,
                                              partitioner=both)
        deliveries[label] = [g[:3] for g in got]
    deliveries["caller_untouched"] = [leaf.tolist(), param.tolist(), plain.tolist()]
    out["own_share"] = deliveries

    # An RRef to a module the caller owns: the module travels with the call, so the worker's
    # first to_here() needs no round trip (the module is pickled in the caller's thread, never
    # by the RPC thread that serves a fetch); otherwise it is the RRef as ever.
    torch.manual_seed(3)
    recorded = RecordedLinear(2, 1)
    module_rref = todist.rpc.RRef(recorded)
    x2 = torch.tensor([[1.0, 2.0]])
    PICKLED_IN_MAIN_THREAD.clear()
    (seen,) = todist.remote_sync_call(use_module_rref, args=(module_rref, x2), partitioner=1)
    out["pushed_module"] = {"seen": seen, "pickled_in_main_thread": list(PICKLED_IN_MAIN_THREAD),
                            "owner_sum": float(recorded.weight.detach().sum()),
                            "value": float(2 * recorded(x2).sum())}
    # Three calls to worker 1 in one message: each gets its own copy, none fetches.
    PICKLED_IN_MAIN_THREAD.clear()
    out["pushed_to_three_calls"] = {
        "seen": todist.remote_sync_call(
            bump_and_sum, args=(module_rref,),
            partitioner=lambda r: [(1, (r,), {}), (1, (r,), {}), (1, (r,), {})]),
        "pickled_in_main_thread": list(PICKLED_IN_MAIN_THREAD)}

    # A message to the owner itself (an asynchronous call) pushes nothing: there to_here()
    # returns the module itself, so the function's change is the owner's.
    before = float(recorded.weight.detach().sum())
    todist.remote_async_call(bump_and_sum, args=(module_rref,), partitioner=0).wait()
    out["to_the_owner_itself"] = float(recorded.weight.detach().sum()) - before

    # What is not a module, or does not pickle, is not pushed: the RRef arrives as ever.
    tensor_rref = todist.rpc.RRef(torch.tensor([1.0, 2.0]))
    recorded.lock = threading.Lock()  # a module that does not pickle any more
    out["not_pushed"] = [
        todist.remote_sync_call(sum_from_rref, args=(tensor_rref,), partitioner=1)[0],
        todist.remote_sync_call(owner_of_rref, args=(module_rref,), partitioner=1)[0]]
    del recorded.lock

    # In the backward pass, worker 1's share gets its gradient before the caller's own share
    # (worker 0, run here) is differentiated, so the two backward passes can run side by side.
    order = []
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    with todist.autograd.context() as context_id:
        here, there = todist.remote_sync_call(
            chain_of_squares, args=(w * 1.0,),
            partitioner=lambda x: [(0, (x,), {}), (1, (x,), {})])
        there.grad_fn.register_prehook(lambda grads: order.append("to worker 1"))
        here.register_hook(lambda grad: order.append("own share"))
        (grad,) = todist.autograd.grad(context_id, here + there, w)
    out["backward_order"] = order
    out["backward_order_grad"] = grad.tolist()  # 2 * 8 w^7

    # A worker's exception: same type, with the worker and its traceback.
    try:
        todist.remote_sync_call(failing_task, args=(torch.ones(3, 1),),
                                partitioner=todist.dim_partitioner(0, exclusive=True))
    except ValueError as error:
        out["worker_error"] = {"type": type(error).__name__, "message": str(error),
                               "notes": getattr(error, "__notes__", [])}
    # A stuck worker: the call fails after its timeout, the caller goes on.
    start = time.monotonic()
    try:
        todist.remote_sync_call(sleepy, args=(4.0,), partitioner=1, timeout=1.0)
    except todist.RemoteCallError as error:
        out["timeout_error"] = {"message": str(error), "seconds": time.monotonic() - start}
    # Functions RPC cannot send by reference.
    try:
        todist.remote_sync_call(lambda: 1, partitioner=1)
    except TypeError as error:
        out["lambda_error"] = str(error)
    out["after_errors"] = todist.remote_sync_call(rows_and_rank, args=(torch.ones(1, 1),),
                                                  partitioner=2)[0][1]


def scenario_kill(out: dict) -> None:
    marker = os.environ["DIFFOPT_TEST_MARKER"]
    start = time.monotonic()
    try:
        todist.remote_sync_call(started_then_sleep, args=(marker, 60.0), partitioner=1)
    finally:
        Path(os.environ["DIFFOPT_TEST_RESULT"]).write_text(
            json.dumps({"seconds": time.monotonic() - start}))


def scenario_early_exit(out: dict) -> None:
    time.sleep(1.5)  # meanwhile worker 1 leaves without shutting down (see main)
    out["work_done"] = True


SCENARIOS = {"maml": scenario_maml, "kill": scenario_kill, "early_exit": scenario_early_exit}


@todist.auto_init_rpc()
def main(name: str, result_path: str) -> None:
    todist.barrier(timeout=60)  # every rank calls it
    if name == "early_exit" and todist.get_world_rank() == 1:
        time.sleep(0.5)  # let the barrier's last messages arrive
        os._exit(0)  # gone without a graceful shutdown: rank 0 must not wait for it forever
    @todist.rank_zero_only
    def drive():
        out: dict = {}
        SCENARIOS[name](out)
        Path(result_path).write_text(json.dumps(out))

    drive()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
