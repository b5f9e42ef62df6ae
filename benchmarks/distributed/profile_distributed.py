#!/usr/bin/env python3
"""Where each rank's CPU goes in one distributed MAML step, against the no-RPC bound.

Not a speed benchmark (test_distributed.py is): an accounting, in one launch of 2 processes, of
bench_distributed.py's workload (16 sinusoid tasks, 5 inner MetaSGD steps, the 1-40-40-1 MLP).
Variants of one outer step alternate in blocks (the order rotated each block), so each shares the
same load:

* ``sequential``: every task on rank 0, as bench_distributed.py's baseline;
* ``half alone``: rank 0's half of the tasks with local autograd, rank 1 idle;
* ``bound``: both halves at once, each rank with plain local autograd (rank 1's half started by
  one RPC without a distributed-autograd context, its gradients sent back and added): what
  perfect distribution code would cost on this machine, the two processes slowing each other;
* each of bench_distributed.py's partitions (``block``, ``task``, ``torchopt``: TorchOpt's
  documented pattern), through diffopt.distributed as the benchmark runs them.

Per variant and rank: process CPU per step (``time.process_time``, every thread), its split by
thread (``/proc/self/task/*/schedstat``: ``python`` is the main thread, ``pt_thread_pool`` the RPC
agent's request threads, ``PTThreadPool`` the distributed autograd engine's, ``TP_UV_loop`` and
``TP_CMA_loop`` TensorPipe's TCP transport and cross-memory-attach channel), and with ``--phases``
the thread CPU inside named functions on both ranks (module_clone, the task's forward, our
packing and unpacking, the distributed backward's caller side...; the wrappers cost a little).

    python benchmarks/distributed/profile_distributed.py [--blocks 4] [--per 10] [--phases]
        [--variants sequential,bound,torchopt] [--tasks 16]

Linux only (schedstat). Meta-gradients of every variant are checked against the sequential
ones before timing.
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_distributed as workload

import diffopt
import diffopt.distributed as todist
from diffopt.distributed import api

INNER_STEPS = 5
PHASES: collections.Counter = collections.Counter()  # function -> thread CPU s in this process
_RANK1_NET: list[torch.nn.Module] = []


def _timed(name: str, func):
    @functools.wraps(func)  # keeps __module__/__qualname__: RPC still sends it by reference
    def wrapped(*args, **kwargs):
        start = time.thread_time()
        try:
            return func(*args, **kwargs)
        finally:
            PHASES[name] += time.thread_time() - start

    return wrapped


def instrument() -> None:
    """Wrap the functions whose thread CPU --phases reports (on the rank that calls it)."""
    diffopt.module_clone = _timed("module_clone", diffopt.module_clone)
    workload.inner_loop = _timed("task forward (inner_loop)", workload.inner_loop)
    torch.autograd.grad = _timed("torch.autograd.grad", torch.autograd.grad)
    dist_autograd.backward = _timed("dist_autograd.backward (caller)", dist_autograd.backward)
    rpc.rpc_async = _timed("rpc.rpc_async", rpc.rpc_async)
    api._calls = _timed("diffopt: partition", api._calls)
    api._pack_calls = _timed("diffopt: pack", api._pack_calls)
    api._ArgumentsUnpickler.load = _timed("diffopt: unpack", api._ArgumentsUnpickler.load)
    api._run_here = _timed("diffopt: own share (all)", api._run_here)
    api._run_calls = _timed("diffopt: worker share (all)", api._run_calls)


def snapshot() -> tuple[float, dict[str, tuple[str, int]], dict[str, float]]:
    """Process CPU, each thread's (name, CPU ns), and the phase totals of this process."""
    threads = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            name = Path(f"/proc/self/task/{tid}/comm").read_text().strip()
            ns = int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0])
        except OSError:  # the thread ended meanwhile
            continue
        threads[tid] = (name, ns)
    return time.process_time(), threads, dict(PHASES)


def _delta(before, after) -> tuple[float, dict[str, float], dict[str, float]]:
    by_thread: dict[str, float] = collections.defaultdict(float)
    for tid, (name, ns) in after[1].items():
        by_thread[name] += (ns - before[1].get(tid, (name, 0))[1]) / 1e9
    phases = {k: v - before[2].get(k, 0.0) for k, v in after[2].items()}
    return after[0] - before[0], dict(by_thread), phases


def _prepare_rank1() -> None:
    torch.set_num_threads(1)
    _RANK1_NET[:] = [workload.make_model(40)]


def _half(net, tasks):
    """A block of tasks with local autograd: the gradient of the sum of their query losses."""
    losses = [workload.inner_loop(diffopt.module_clone(net, by="reference"),
                                  *(t[i] for t in tasks), INNER_STEPS)
              for i in range(tasks[0].shape[0])]
    return torch.autograd.grad(torch.stack(losses).sum(), tuple(net.parameters()))


def _rank1_half(tasks):
    return _half(_RANK1_NET[0], tasks)


def half_alone(net, tasks, steps):
    return _half(net, tuple(t[: t.shape[0] // 2] for t in tasks))


def bound(net, tasks, steps):
    count = tasks[0].shape[0]
    future = rpc.rpc_async(1, _rank1_half, args=(tuple(t[count // 2:] for t in tasks),))
    mine = _half(net, tuple(t[: count // 2] for t in tasks))
    return tuple((a + b) / count for a, b in zip(mine, future.wait()))


VARIANTS = {"sequential": workload.sequential_step, "half alone": half_alone, "bound": bound,
            **workload.STEPS}


def drive(args) -> None:
    torch.set_num_threads(1)
    rpc.rpc_sync(1, _prepare_rank1)
    if args.phases:
        rpc.rpc_sync(1, instrument)
        instrument()
    names = args.variants.split(",")
    net = workload.make_model(40)
    check = workload.sample_tasks(args.tasks, 10, 12345)
    reference = workload.sequential_step(net, check, INNER_STEPS)
    for name in names:  # check, then warm up
        got = VARIANTS[name](net, check, INNER_STEPS)
        if name != "half alone":
            diff = max(float((a - b).abs().max()) for a, b in zip(reference, got))
            print(f"{name}: meta-gradient max diff against sequential {diff:.1e}")
        for i in range(2):
            VARIANTS[name](net, workload.sample_tasks(args.tasks, 10, 1000 + i), INNER_STEPS)
    cpu = {name: ([], []) for name in names}
    threads = {name: (collections.Counter(), collections.Counter()) for name in names}
    phases = {name: (collections.Counter(), collections.Counter()) for name in names}
    loads = [os.getloadavg()[0]]
    for block in range(args.blocks):
        shift = block % len(names)
        for name in names[shift:] + names[:shift]:
            before = (snapshot(), rpc.rpc_sync(1, snapshot))
            for i in range(args.per):
                VARIANTS[name](net, workload.sample_tasks(args.tasks, 10, i), INNER_STEPS)
            after = (snapshot(), rpc.rpc_sync(1, snapshot))
            for rank in (0, 1):
                seconds, by_thread, by_phase = _delta(before[rank], after[rank])
                cpu[name][rank].append(seconds / args.per)
                threads[name][rank].update({k: v / args.per / args.blocks
                                            for k, v in by_thread.items()})
                phases[name][rank].update({k: v / args.per / args.blocks
                                           for k, v in by_phase.items()})
    loads.append(os.getloadavg()[0])
    report(args, names, cpu, threads, phases, loads)


def report(args, names, cpu, threads, phases, loads) -> None:
    ms = 1e3
    print(f"\n{args.tasks} tasks, {INNER_STEPS} inner steps; {args.blocks} blocks x {args.per} "
          f"steps per variant; load average {loads[0]:.2f} -> {loads[1]:.2f}\n")
    print("| variant | CPU ms/step, rank 0 | rank 1 | CPU-bound speed-up | blocks (rank 0; 1) |")
    print("|---|---:|---:|---:|---|")
    baseline = statistics.median(cpu["sequential"][0]) if "sequential" in cpu else None
    for name in names:
        medians = [statistics.median(cpu[name][rank]) for rank in (0, 1)]
        speedup = f"{baseline / max(medians):.2f}x" if baseline else "-"
        blocks = "; ".join(" ".join(f"{c * ms:.1f}" for c in cpu[name][rank]) for rank in (0, 1))
        print(f"| {name} | {medians[0] * ms:.2f} | {medians[1] * ms:.2f} | {speedup} | {blocks} |")
    for title, table in (("thread", threads), ("phase (thread CPU inside)", phases)):
        keys = sorted({k for name in names for rank in (0, 1) for k in table[name][rank]})
        keys = [k for k in keys if any(table[n][r][k] > 2e-5 for n in names for r in (0, 1))]
        if not keys:
            continue
        print(f"\nMean CPU ms/step by {title}, rank 0 / rank 1:\n")
        print(f"| {title.split()[0]} | " + " | ".join(names) + " |")
        print("|---|" + "---:|" * len(names))
        for key in keys:
            cells = [f"{table[n][0][key] * ms:.2f} / {table[n][1][key] * ms:.2f}" for n in names]
            print(f"| {key} | " + " | ".join(cells) + " |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--per", type=int, default=10, help="steps per block")
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--phases", action="store_true",
                        help="also the thread CPU inside named functions (slightly slower)")
    parser.add_argument("--deadline", type=float, default=900, help="seconds, then both "
                        "ranks are killed")
    args = parser.parse_args()
    unknown = set(args.variants.split(",")) - set(VARIANTS)
    if unknown:
        parser.error(f"unknown variants {sorted(unknown)}; choose from {sorted(VARIANTS)}")
    if os.environ.get("RANK") is None:  # launch the two ranks, as torchrun would
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        procs = [subprocess.Popen([sys.executable, __file__, *sys.argv[1:]],
                                  env=dict(os.environ, RANK=str(rank), WORLD_SIZE="2",
                                           LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE="2",
                                           MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                                           OMP_NUM_THREADS="1"))
                 for rank in (0, 1)]
        try:
            return max(proc.wait(timeout=args.deadline) for proc in procs)
        finally:  # a rank that failed leaves the other waiting for it
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
    torch.set_num_threads(1)
    todist.auto_init_rpc(lambda: torch.set_num_threads(1))(todist.rank_zero_only(drive))(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
