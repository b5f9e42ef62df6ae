#!/usr/bin/env python3
"""The optimizer step under FSDP2: fused_optim's drop-in against torch.optim's three paths (the
default, ``foreach=True``, ``fused=True``) on the same mesh and the same sharded parameters.

An MLP of ``--layers`` square ``--width`` x ``--width`` linear layers is wrapped with
``fully_shard`` layer by layer on ``--world`` ranks (gloo CPU processes on loopback; with
``--device cuda``, NCCL with one GPU per rank, as many ranks as GPUs up to ``--world``). One
backward fills the gradients; then each contender is its own optimizer (its own state) over the
same DTensor parameters, and the ranks time ``optimizer.step()`` alone: every round runs each
contender for ``--steps`` steps in the balanced order of ``benchmarks/_suite.round_order`` (so a
burst of load hits all alike), each step between barriers, and keeps the median step; the figure
of a step is the slowest rank's. torch.optim's default path on CPU parameters (DTensor or not) is
its for-loop implementation; foreach and fused are asked for explicitly.

    python benchmarks/distributed/bench_fsdp_step.py [--quick] [pytest options]

runs ``pytest benchmarks/distributed/test_fsdp_step.py`` (the pytest-benchmark suite and its ratio
report; see benchmarks/RESULTS.md); ``--role rank`` is one rank (what ``launch`` starts).
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

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # benchmarks/_suite.py (round_order)

OPTIMIZERS = {"Adam": dict(lr=1e-6, weight_decay=0.01), "SGD": dict(lr=1e-6, momentum=0.9)}
CONTENDERS = ["fused_optim", "torch default", "torch foreach", "torch fused"]


def make_optimizer(contender: str, name: str, params: list[torch.Tensor]) -> torch.optim.Optimizer:
    import fused_optim

    kwargs = OPTIMIZERS[name]
    if contender == "fused_optim":
        return getattr(fused_optim, name)(params, **kwargs)
    extra = {
        "torch default": {},
        "torch foreach": dict(foreach=True),
        "torch fused": dict(fused=True),
    }
    return getattr(torch.optim, name)(params, **kwargs, **extra[contender])


def rank_main(args: argparse.Namespace) -> None:
    """One rank: the sharded model, every contender's optimizer, the interleaved timed rounds;
    rank 0 writes ``{contender: [median step seconds of each round]}`` (or the error) to --out."""
    import _suite
    import torch.distributed as dist
    from torch import nn
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    torch.set_num_threads(args.threads)
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    torch.manual_seed(0)
    model = nn.Sequential(*(nn.Linear(args.width, args.width) for _ in range(args.layers))).to(
        device
    )
    mesh = init_device_mesh(device.type, (world,))
    for layer in model:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model(torch.randn(8, args.width, device=device)).square().mean().backward()
    params = list(model.parameters())

    optimizers, errors = {}, {}
    for contender in CONTENDERS:
        try:
            opt = make_optimizer(contender, args.optimizer, params)
            for _ in range(max(args.warmup, 1)):  # the first step creates the state
                opt.step()
            optimizers[contender] = opt
        except Exception as exc:  # a peer that cannot step DTensors is reported, not fatal
            errors[contender] = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    samples: dict[str, list[float]] = {c: [] for c in optimizers}
    for r in range(args.rounds):
        for contender in _suite.round_order(list(optimizers), r):
            steps = []
            for _ in range(args.steps):
                dist.barrier()
                sync()
                tic = time.perf_counter()
                optimizers[contender].step()
                sync()
                steps.append(time.perf_counter() - tic)
            samples[contender].append(statistics.median(steps))
    # Each sample is the slowest rank's.
    names = list(samples)
    table = torch.tensor([samples[c] for c in names], dtype=torch.float64).reshape(
        len(names), args.rounds
    )
    dist.all_reduce(table, op=dist.ReduceOp.MAX)
    if rank == 0:
        shard = sum(p.to_local().numel() for p in params)
        result = {
            "samples": {c: table[i].tolist() for i, c in enumerate(names)},
            "errors": errors,
            "world": world,
            "device": str(device),
            "shard_numel": shard,
            "load": os.getloadavg()[0],
        }
        Path(args.out).write_text(json.dumps(result))
    dist.barrier()  # both ranks done before either tears the group down
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def launch(args: argparse.Namespace, deadline_s: float = 900) -> dict:
    """Run the ranks (killed at the deadline); rank 0's figures."""
    world = args.world
    if args.device == "cuda":
        world = min(world, torch.cuda.device_count())
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        command = [sys.executable, __file__, "--role", "rank", "--out", str(out)]
        for key in (
            "optimizer",
            "width",
            "layers",
            "steps",
            "rounds",
            "warmup",
            "threads",
            "device",
        ):
            command += [f"--{key}", str(getattr(args, key))]
        port = free_port()
        procs = []
        for rank in range(world):
            env = dict(
                os.environ,
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                RANK=str(rank),
                WORLD_SIZE=str(world),
                LOCAL_RANK=str(rank),
                LOCAL_WORLD_SIZE=str(world),
                OMP_NUM_THREADS=str(args.threads),
            )
            if Path("/sys/class/net/lo").exists():
                env["GLOO_SOCKET_IFNAME"] = "lo"
            procs.append(
                subprocess.Popen(
                    command,
                    env=env,
                    start_new_session=True,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        end = time.monotonic() + deadline_s
        errors = []
        for rank, proc in enumerate(procs):
            try:
                _, err = proc.communicate(timeout=max(end - time.monotonic(), 1))
            except subprocess.TimeoutExpired as error:
                for p in procs:
                    if p.poll() is None:
                        os.killpg(p.pid, signal.SIGKILL)
                raise RuntimeError(
                    f"the FSDP2 step benchmark passed its {deadline_s} s deadline"
                ) from error
            if proc.returncode != 0:
                errors.append(f"rank {rank} exited with {proc.returncode}: {err[-2000:]}")
        if errors:
            raise RuntimeError("the FSDP2 step benchmark failed:\n" + "\n".join(errors))
        return json.loads(out.read_text())


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--role", choices=["driver", "rank"], default="driver")
    p.add_argument("--out", type=Path)
    p.add_argument("--optimizer", choices=list(OPTIMIZERS), default="Adam")
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--steps", type=int, default=5, help="timed steps per contender and round")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    return p


def main() -> int:
    if "--role" in sys.argv and "rank" in sys.argv:
        rank_main(parser().parse_args())
        # Done (rank 0's result is written): leave without the interpreter's teardown. A rank
        # sometimes aborted there, after its work, with "terminate called without an active
        # exception" (a C++ thread still joinable as static objects are destroyed; seen in about 1
        # of 10 CI runs, with and without a barrier before destroy_process_group).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    import _suite  # the driver: every option goes to pytest (the suite's --rounds, --quick...)

    return _suite.run_suite(HERE / "test_fsdp_step.py", sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
