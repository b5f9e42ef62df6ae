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

The machine is shared with other work, so wall time is only half the story:

* the configurations are interleaved round by round (background load hits all of them alike);
  each run times ``--steps`` outer steps after warm-up and keeps the median step; the table gives
  the best and the median over rounds, and the 1-minute load average during the runs;
* each process's CPU time per step is measured too (``time.process_time`` on every rank, read
  over RPC). Background load stretches wall time but hardly CPU time, so "CPU-bound speed-up" =
  sequential CPU per step / the busiest rank's CPU per step is the speed-up the same code would
  get with a free core per worker.

Before timing, each distributed run checks its meta-gradient against the sequential one.

    python benchmarks/distributed/bench_distributed.py [--rounds 5] [--steps 15] [--tasks 16]
    python benchmarks/distributed/bench_distributed.py --quick    # 1 round of 3 steps, a smoke run

A progress bar over the launches (rounds x configurations) runs on stderr (``--no-progress`` or
``NO_PROGRESS=1`` turns it off); the markdown table ends with a summary against issue 6's target.
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _report  # benchmarks/_report.py: the progress bar and the summary table


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
    parser.add_argument("--rounds", type=int, default=5)
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
    parser.add_argument("--quick", action="store_true",
                        help="1 round of 3 timed steps after 1 warm-up (a smoke run)")
    _report.add_progress_flag(parser)
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.steps, args.warmup = 1, 3, 1

    if args.role != "driver":
        torch.set_num_threads(args.threads)
        result = run_sequential(args) if args.role == "sequential" else run_distributed(args)
        if result is not None:
            args.out.write_text(json.dumps(result))
        return 0

    configs = [("sequential, 1 thread", "sequential", 1, 1),
               ("sequential, 2 threads", "sequential", 1, 2),
               ("distributed, 1 worker", "distributed", 1, 1),
               ("distributed, 2 workers", "distributed", 2, 1)]
    results: dict[str, list[dict]] = {name: [] for name, *_ in configs}
    print(f"MAML step: MLP 1-{args.width}-{args.width}-1, {args.tasks} tasks x {args.k}+{args.k} "
          f"points, {args.inner_steps} inner MetaSGD steps; {args.rounds} rounds x {args.steps} "
          f"steps; {os.cpu_count()} CPUs; one RPC per "
          f"{'task' if args.partition == 'task' else 'worker'} ({args.partition}); TensorPipe transports: "
          f"{'torch defaults (shm)' if args.torch_transports else 'diffopt default (uv/TCP)'}",
          flush=True)
    bar = _report.progress(desc="distributed MAML", total=args.rounds * len(configs),
                           unit="run", no_progress=args.no_progress)
    for round_ in range(args.rounds):
        for name, role, workers, threads in configs:
            bar.set_postfix_str(f"round {round_ + 1}: {name}")
            results[name].append(launch(args, role, workers, threads))
            bar.update()
        _report.write(f"round {round_ + 1}: " + ", ".join(
            f"{name} {results[name][-1]['wall'] * 1e3:.1f} ms" for name, *_ in configs))
    bar.close()

    seq_cpu = statistics.median(r["cpu_per_rank"][0] for r in results["sequential, 1 thread"])
    base = min(r["wall"] for r in results["sequential, 1 thread"])
    base_median = statistics.median(r["wall"] for r in results["sequential, 1 thread"])
    print("\n| configuration | best ms/step | median ms/step | speed-up (best) | "
          "speed-up (median) | CPU ms/step per rank | CPU-bound speed-up | load avg | "
          "meta-grad max diff |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    wall = _report.Comparison("wall-clock speed-up (median)", 1.7, scope="2 workers")
    cpu_bound = _report.Comparison("CPU-bound speed-up", 1.7, scope="2 workers")
    for name, *_ in configs:
        walls = [r["wall"] for r in results[name]]
        best, median = min(walls), statistics.median(walls)
        ranks = len(results[name][0]["cpu_per_rank"])
        cpu = [statistics.median(r["cpu_per_rank"][i] for r in results[name])
               for i in range(ranks)]
        cpu_text = " / ".join(f"{c * 1e3:.1f}" for c in cpu)
        load = statistics.median(r["load"] for r in results[name])
        diff = max((r.get("grad_diff", 0.0) for r in results[name]), default=0.0)
        diff_text = f"{diff:.1e}" if name.startswith("distributed") else "-"
        print(f"| {name} | {best * 1e3:.1f} | {median * 1e3:.1f} | {base / best:.2f}x | "
              f"{base_median / median:.2f}x | {cpu_text} | {seq_cpu / max(cpu):.2f}x | "
              f"{load:.1f} | {diff_text} |")
        if name != "sequential, 1 thread":  # the baseline itself
            wall.add(name, base_median / median, targeted=name == "distributed, 2 workers")
            cpu_bound.add(name, seq_cpu / max(cpu), targeted=name == "distributed, 2 workers")
    diffs = [r["grad_diff"] for rs in results.values() for r in rs if "grad_diff" in r]
    print(f"\nMeta-gradient check: the distributed runs differ from the sequential one by at "
          f"most {max(diffs):.1e} (max abs difference over every entry).")
    print()
    print(_report.summary_table(
        [wall, cpu_bound], title="Summary against issue 6's target",
        note="ratio = sequential (1 thread) time / the configuration's; above 1: it is faster"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
