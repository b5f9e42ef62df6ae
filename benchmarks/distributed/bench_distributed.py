#!/usr/bin/env python3
"""Speed-up of distributed MAML (diffopt.distributed over torch RPC) over sequential MAML.

One outer step = for each of ``--tasks`` sinusoid tasks, ``--inner-steps`` differentiable
MetaSGD steps of an MLP on the support set and the query loss; the mean query loss; the
meta-gradient back through every inner loop. Configurations, each in fresh processes:

* ``sequential``: one process, tasks one after the other (1 intra-op thread, and 2 threads);
* ``distributed, W workers``: W processes on loopback (TensorPipe under ``auto_init_rpc``), rank 0
  drives and works; the task batch is split by ``batch_partitioner`` into one contiguous block
  per worker (one RPC per worker and step; ``--partition task`` makes one RPC per task with
  ``dim_partitioner(0, exclusive=True, keepdim=False)`` instead; ``--partition torchopt`` is
  TorchOpt's documented pattern: the module sent as an ``RRef``, ``dim_partitioner(0,
  exclusive=False, keepdim=True)``, ``mean_reducer``), block losses summed by
  ``sum_reducer``, the meta-gradient taken by ``diffopt.distributed.autograd`` through the remote
  inner loops. 1 thread per process.

Each run times ``--steps`` outer steps after warm-up and keeps the median step; each process's
CPU time per step is measured too (``time.process_time`` on every rank, read over RPC), because
background load on a shared machine stretches wall time but hardly CPU time. Before timing, each
distributed run checks its meta-gradient against the sequential one.

    python benchmarks/distributed/bench_distributed.py [--quick] [pytest options]

is ``pytest benchmarks/distributed/test_distributed.py`` (test_distributed.py, the
pytest-benchmark suite, launches the configurations in interleaved rounds; see
benchmarks/RESULTS.md); ``--role`` runs one configuration (its child processes).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import diffopt
import diffopt.distributed as todist


def make_model(width: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(1, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                         nn.Linear(width, 1))


def sample_tasks(n_tasks: int, k: int, seed: int):
    generator = torch.Generator().manual_seed(seed)
    amplitude = 0.1 + 4.9 * torch.rand(n_tasks, 1, 1, generator=generator)
    phase = 3.14159 * torch.rand(n_tasks, 1, 1, generator=generator)
    x = 10.0 * torch.rand(n_tasks, 2 * k, 1, generator=generator) - 5.0
    y = amplitude * torch.sin(x + phase)
    return x[:, :k], y[:, :k], x[:, k:], y[:, k:]


def inner_loop(net, x_support, y_support, x_query, y_query, steps: int):
    inner = diffopt.MetaSGD(net, lr=0.01)
    for _ in range(steps):
        inner.step(F.mse_loss(net(x_support), y_support))
    return F.mse_loss(net(x_query), y_query)


def inner_loops(net, x_support, y_support, x_query, y_query, steps: int):
    """One worker's block of tasks: the sum of their query losses (each from its own copy)."""
    return torch.stack([
        inner_loop(diffopt.module_clone(net, by="reference"), x_support[i], y_support[i],
                   x_query[i], y_query[i], steps)
        for i in range(x_support.shape[0])]).sum()


def sequential_step(net, tasks, steps):
    losses = [inner_loop(diffopt.module_clone(net, by="clone"), *(t[i] for t in tasks), steps)
              for i in range(tasks[0].shape[0])]
    loss = torch.stack(losses).mean()
    return torch.autograd.grad(loss, tuple(net.parameters()))


def distributed_step(net, tasks, steps):
    """Tasks split into one contiguous block per worker (one RPC per worker and step)."""
    with todist.autograd.context() as context_id:
        total = todist.remote_sync_call(
            inner_loops, args=(diffopt.module_clone(net, by="clone"), *tasks, steps),
            partitioner=todist.batch_partitioner, reducer=todist.sum_reducer)
        loss = total / tasks[0].shape[0]
        return todist.autograd.grad(context_id, loss, tuple(net.parameters()))


def distributed_step_per_task(net, tasks, steps):
    """One RPC per task (exclusive partition), dealt round-robin."""
    with todist.autograd.context() as context_id:
        loss = todist.remote_sync_call(
            inner_loop, args=(diffopt.module_clone(net, by="clone"), *tasks, steps),
            partitioner=todist.dim_partitioner(0, exclusive=True, keepdim=False),
            reducer=todist.mean_reducer)
        return todist.autograd.grad(context_id, loss, tuple(net.parameters()))


def inner_loops_rref(net_rref, x_support, y_support, x_query, y_query, steps: int):
    """TorchOpt's documented worker function: fetch the module behind the RRef, then its block of
    tasks, each on a reference clone with detached buffers; the block's mean query loss."""
    net = net_rref.to_here()
    return torch.stack([
        inner_loop(diffopt.module_clone(net, by="reference", detach_buffers=True), x_support[i],
                   y_support[i], x_query[i], y_query[i], steps)
        for i in range(x_support.shape[0])]).mean()


def distributed_step_rref(net, tasks, steps):
    """TorchOpt's documented pattern: the module sent as an RRef to a copy,
    ``dim_partitioner(0, exclusive=False, keepdim=True)``, ``mean_reducer``."""
    net_rref = todist.rpc.RRef(diffopt.module_clone(net, by="copy"))
    with todist.autograd.context() as context_id:
        loss = todist.remote_sync_call(
            inner_loops_rref, args=(net_rref, *tasks, steps),
            partitioner=todist.dim_partitioner(0, exclusive=False, keepdim=True),
            reducer=todist.mean_reducer)
        return todist.autograd.grad(context_id, loss, tuple(net.parameters()))


STEPS = {"block": distributed_step, "task": distributed_step_per_task,
         "torchopt": distributed_step_rref}


def cpu_times() -> list[float]:
    """Process CPU seconds of every rank (just this process when RPC is not running)."""
    if not todist.world._rpc_running():
        return [time.process_time()]
    return [todist.remote_sync_call(time.process_time, partitioner=rank)[0]
            for rank in range(todist.get_world_size())]


def time_steps(step, net, args) -> dict:
    """Median wall and CPU seconds of one outer step (after warm-up), on fresh tasks each step,
    and the CPU seconds per step each rank spent over the whole timed loop."""
    for i in range(args.warmup):
        step(net, sample_tasks(args.tasks, args.k, 1000 + i), args.inner_steps)
    walls = []
    before = cpu_times()
    for i in range(args.steps):
        tasks = sample_tasks(args.tasks, args.k, i)
        wall = time.perf_counter()
        step(net, tasks, args.inner_steps)
        walls.append(time.perf_counter() - wall)
    per_rank = [(b - a) / args.steps for a, b in zip(before, cpu_times())]
    return {"wall": statistics.median(walls), "cpu_per_rank": per_rank,
            "load": os.getloadavg()[0]}


def run_sequential(args) -> dict:
    torch.set_num_threads(args.threads)
    return time_steps(sequential_step, make_model(args.width), args)


def rpc_options(args):
    """``None``: auto_init_rpc's defaults (TensorPipe over TCP); ``--torch-transports``:
    TensorPipe's own defaults, shared memory included, for comparison."""
    if not args.torch_transports:
        return None
    return todist.rpc.TensorPipeRpcBackendOptions()


def run_distributed(args) -> dict | None:
    return todist.auto_init_rpc(lambda: torch.set_num_threads(1),
                                rpc_backend_options=rpc_options(args))(_run_distributed)(args)


def _run_distributed(args) -> dict | None:
    @todist.rank_zero_only
    def drive():
        net = make_model(args.width)
        tasks = sample_tasks(args.tasks, args.k, 12345)
        reference = sequential_step(net, tasks, args.inner_steps)
        step = STEPS[args.partition]
        got = step(net, tasks, args.inner_steps)
        diff = max(float((a - b).abs().max()) for a, b in zip(reference, got))
        return {**time_steps(step, net, args), "grad_diff": diff}

    return drive()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(args, config: str, workers: int, threads: int, deadline_s: float = 600) -> dict:
    """Run one configuration in fresh processes (killed at the deadline); rank 0's figures."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        command = [sys.executable, __file__, "--role", config, "--out", str(out),
                   "--threads", str(threads), "--width", str(args.width), "--tasks",
                   str(args.tasks), "--k", str(args.k), "--inner-steps", str(args.inner_steps),
                   "--steps", str(args.steps), "--warmup", str(args.warmup)]
        command += ["--partition", args.partition]
        if args.torch_transports:
            command.append("--torch-transports")
        port = free_port()
        procs = []
        for rank in range(workers):
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                       RANK=str(rank), WORLD_SIZE=str(workers), LOCAL_RANK=str(rank),
                       LOCAL_WORLD_SIZE=str(workers), OMP_NUM_THREADS=str(threads))
            procs.append(subprocess.Popen(command, env=env, start_new_session=True,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                          text=True))
        end = time.monotonic() + deadline_s
        errors = []
        for proc in procs:
            try:
                _, err = proc.communicate(timeout=max(end - time.monotonic(), 1))
            except subprocess.TimeoutExpired as error:
                for p in procs:
                    if p.poll() is None:
                        os.killpg(p.pid, signal.SIGKILL)
                raise RuntimeError(f"{config} x{workers} passed its {deadline_s} s "
                                   f"deadline") from error
            if proc.returncode != 0:
                errors.append(f"rank {procs.index(proc)} exited with {proc.returncode}: "
                              f"{err[-2000:]}")
        if errors:
            raise RuntimeError(f"{config} x{workers} failed:\n" + "\n".join(errors))
        return json.loads(out.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--inner-steps", type=int, default=5)
    parser.add_argument("--width", type=int, default=40)
    parser.add_argument("--role", choices=["driver", "sequential", "distributed"],
                        default="driver")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--partition", choices=list(STEPS), default="block",
                        help="one RPC per worker (block), per task, or TorchOpt's documented "
                             "pattern (torchopt: module as an RRef, dim_partitioner(0, "
                             "exclusive=False, keepdim=True), mean_reducer)")
    parser.add_argument("--torch-transports", action="store_true",
                        help="TensorPipe's default transports (shared memory) instead of TCP")
    args, rest = parser.parse_known_args()

    if args.role != "driver":
        torch.set_num_threads(args.threads)
        result = run_sequential(args) if args.role == "sequential" else run_distributed(args)
        if result is not None:
            args.out.write_text(json.dumps(result))
        return 0
    # The driver: test_distributed.py launches the configurations in interleaved rounds.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import _suite

    return _suite.run_suite(Path(__file__).with_name("test_distributed.py"), rest)


if __name__ == "__main__":
    sys.exit(main())
