#!/usr/bin/env python3
"""Where the differentiable Adam update's call goes on small tensors: per layer, and one call at a time.

The suite's ``differentiable`` rows (test_optim.py) time ``F.adam_direction`` forward + backward
against op-by-op PyTorch; on one 1k-element tensor the kernels are a few microseconds and the rest
is the call's Python and autograd. This script splits that time, and compares with the
*leanest* ``torch.autograd.Function`` around the same unboxed kernels (three tensors, positional
hyper-parameters, no checks, no general path): the floor for autograd glue written in Python.

Default: the thread CPU time per call of each layer (medians of blocks of calls, blocks of the
layers interleaved; CPU time, so a round that waits for a core on a shared box does not count):
the public function, ``apply_functional``, the node's C++ apply, the unboxed kernel alone (no
grad), the backward alone (``retain_graph``), forward + backward; the same for the leanest
Function. ``--cprofile`` prints the Python functions with the most own time over forward +
backward calls. ``--interleaved`` times single calls (what the suite does) in rotated rounds
across fused_optim, op-by-op and the leanest Function (``--torchopt``: and TorchOpt's two
contenders, as the suite rotates them), printing medians of wall and thread CPU time and the
op-by-op ratios.

    python benchmarks/optim/profile_differentiable.py [--size 1000] [--tensors 1]
    python benchmarks/optim/profile_differentiable.py --cprofile
    python benchmarks/optim/profile_differentiable.py --device cuda --torch-profile --calls 50   # a GPU's host costs
    python benchmarks/optim/profile_differentiable.py --interleaved --rounds 400 [--torchopt] [--shuffle]
                                                      [--first "leanest Function"]
                                                      [--after "torchopt scale_by_adam"]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

import fused_optim.functional as F
from fused_optim import _native, _reference, ops

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_optim as workloads  # this folder's workloads (TorchOpt's contenders)

B1, B2, EPS, STEP = workloads.B1, workloads.B2, workloads.EPS, 3


def _problem(size: int, tensors: int, device: str = "cpu") -> dict[str, object]:
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(size, generator=gen).to(device).requires_grad_() for _ in range(tensors)]
    mus = [torch.randn(size, generator=gen).mul_(0.01).to(device).requires_grad_() for _ in range(tensors)]
    nus = [torch.rand(size, generator=gen).mul_(1e-4).to(device).requires_grad_() for _ in range(tensors)]
    weights = [torch.randn(size, generator=gen).to(device) for _ in range(tensors)]
    return {"grads": grads, "mus": mus, "nus": nus, "weights": weights, "leaves": grads + mus + nus}


def _unboxed(name: str) -> Callable[..., object]:
    """The op ``name`` called positionally: its unboxed call on the fast path, else through
    ``torch.ops`` (any torch but the build's, e.g. a GPU machine's)."""
    if _native.BUILD_INFO["eager"]:
        return _native.EAGER[name]  # type: ignore[no-any-return]
    op = getattr(torch.ops.fused_optim, name).default
    keywords = [a.name for a in op._schema.arguments if a.kwarg_only]
    lists = len(op._schema.arguments) - len(keywords)
    return lambda *args: op(*args[:lists], **dict(zip(keywords, args[lists:])))


def _leanest() -> type[torch.autograd.Function]:
    eager, eager_backward = _unboxed("adam_direction"), _unboxed("adam_direction_backward")

    class Leanest(torch.autograd.Function):
        """One tensor of each kind, positional constants, no checks: the floor of Python glue."""

        @staticmethod
        def forward(ctx, g, m, v):  # type: ignore[no-untyped-def, override]
            (d,), (new_m,), (new_v,) = eager([g], [m], [v], STEP, B1, B2, EPS, 0.0)
            ctx.save_for_backward(g, m, v)
            return d, new_m, new_v

        @staticmethod
        def backward(ctx, gd, gm, gv):  # type: ignore[no-untyped-def, override]
            g, m, v = ctx.saved_tensors
            (a,), (b,), (c,) = eager_backward([gd], [gm], [gv], [g], [m], [v], STEP, B1, B2, EPS, 0.0)
            return a, b, c

    return Leanest


def _contenders(p: dict[str, object], with_torchopt: bool) -> dict[str, Callable[[], object]]:
    grads, mus, nus, weights, leaves = (p[k] for k in ("grads", "mus", "nus", "weights", "leaves"))
    leanest = _leanest()

    def loss_of(directions):  # type: ignore[no-untyped-def]
        return sum((d * w).sum() for d, w in zip(directions, weights))

    def ours():  # type: ignore[no-untyped-def]
        d, _, _ = F.adam_direction(grads, mus, nus, STEP, beta1=B1, beta2=B2, eps=EPS)
        torch.autograd.grad(loss_of(d), leaves)

    def op_by_op():  # type: ignore[no-untyped-def]
        d, _, _ = _reference.adam_direction(grads, mus, nus, step=STEP, beta1=B1, beta2=B2, eps=EPS, eps_root=0.0)
        torch.autograd.grad(loss_of(d), leaves)

    def lean():  # type: ignore[no-untyped-def]
        d = [leanest.apply(g, m, v)[0] for g, m, v in zip(grads, mus, nus)]
        torch.autograd.grad(loss_of(d), leaves)

    fns: dict[str, Callable[[], object]] = {"fused_optim": ours, "op-by-op": op_by_op, "leanest Function": lean}
    if with_torchopt:
        suite_fns, _ = workloads.differentiable_contenders([grads[0].numel()] * len(grads))
        fns.update({k: v for k, v in suite_fns.items() if k.startswith("torchopt") and callable(v)})
    return fns


def _layers(p: dict[str, object], blocks: int, calls: int) -> None:
    grads, mus, nus, weights, leaves = (p[k] for k in ("grads", "mus", "nus", "weights", "leaves"))
    kwargs = {"step": STEP, "beta1": B1, "beta2": B2, "eps": EPS, "eps_root": 0.0}
    lists = [grads, mus, nus]
    leanest = _leanest()
    node = ops.node_class("FusedAdamDirection")
    c_apply = super(torch.autograd.Function, node).apply  # type: ignore[misc]
    spec = ops.FUNCTIONAL_OPS["adam_direction"]
    sizes = (len(grads),) * 3
    plan = ops._Plan(sizes, sizes, (0, 3)) if hasattr(ops, "_Plan") else None  # (older builds: none)
    hyper = tuple(kwargs.values())
    flat = (*grads, *mus, *nus)
    eager = _unboxed("adam_direction")

    def loss_of(directions):  # type: ignore[no-untyped-def]
        return sum((d * w).sum() for d, w in zip(directions, weights))

    def kernel_no_grad():  # type: ignore[no-untyped-def]
        with torch.no_grad():
            eager(grads, mus, nus, *hyper)

    retained_ours = loss_of(F.adam_direction(grads, mus, nus, STEP, beta1=B1, beta2=B2, eps=EPS)[0])
    retained_lean = loss_of([leanest.apply(g, m, v)[0] for g, m, v in zip(grads, mus, nus)])
    layers: dict[str, Callable[[], object]] = {
        "F.adam_direction (forward)": lambda: F.adam_direction(grads, mus, nus, STEP, beta1=B1, beta2=B2, eps=EPS),
        "apply_functional": lambda: ops.apply_functional("adam_direction", lists, kwargs),
        "the general path (_apply_node)": lambda: ops._apply_node(node, spec, lists, kwargs),
        "the node's C++ apply (a plan)": (lambda: c_apply(hyper, plan, *flat)) if plan else None,
        "the unboxed kernel, no grad": kernel_no_grad,
        "backward alone (retain_graph)": lambda: torch.autograd.grad(retained_ours, leaves, retain_graph=True),
        "forward + backward": _contenders(p, False)["fused_optim"],
        "leanest: Function.apply": lambda: [leanest.apply(g, m, v) for g, m, v in zip(grads, mus, nus)],
        "leanest: backward alone": lambda: torch.autograd.grad(retained_lean, leaves, retain_graph=True),
        "leanest: forward + backward": _contenders(p, False)["leanest Function"],
        "op-by-op: forward + backward": _contenders(p, False)["op-by-op"],
    }
    times = _blocks({name: fn for name, fn in layers.items() if fn is not None}, blocks, calls)
    print(f"thread CPU time per call, median of {blocks} blocks of {calls} calls (load {_load()})")
    for name, samples in times.items():
        print(f"  {name:34s} {statistics.median(samples):8.2f} us")


def _blocks(fns: dict[str, Callable[[], object]], blocks: int, calls: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        for _ in range(calls):
            fn()
    for _ in range(blocks):
        for name, fn in fns.items():
            start = time.thread_time()
            for _ in range(calls):
                fn()
            times[name].append((time.thread_time() - start) / calls * 1e6)
    return times


def _interleaved(fns: dict[str, Callable[[], object]], rounds: int, shuffle: bool,
                 after: Callable[[], object] | None = None) -> None:
    names = list(fns)
    order = random.Random(0)
    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    for fn in fns.values():
        for _ in range(20):
            fn()
    load_before = _load()
    for r in range(rounds):
        # Rotated as the suite does (so each contender mostly follows the same one: the suite's
        # first, ours, follows TorchOpt's last), or shuffled (each follows any other as often).
        for name in order.sample(names, len(names)) if shuffle else names[r % len(names):] + names[:r % len(names)]:
            fn = fns[name]
            if after is not None:  # untimed: every sample then starts with the caches it left
                after()
            c0, w0 = time.thread_time(), time.perf_counter()
            fn()
            w1, c1 = time.perf_counter(), time.thread_time()
            wall[name].append((w1 - w0) * 1e6)
            cpu[name].append((c1 - c0) * 1e6)
    print(f"one call per sample, {rounds} {'shuffled' if shuffle else 'rotated'} rounds"
          f"{', each sample after an untimed call of the --after contender' if after else ''}, medians "
          f"(load {load_before} -> {_load()})")
    base_wall, base_cpu = statistics.median(wall["op-by-op"]), statistics.median(cpu["op-by-op"])
    for name in names:
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        print(f"  {name:24s} wall {w:8.2f} us (op-by-op / it {base_wall / w:5.2f})   "
              f"CPU {c:8.2f} us (op-by-op / it {base_cpu / c:5.2f})")


def _cprofile(fn: Callable[[], object], calls: int, top: int) -> None:
    for _ in range(100):
        fn()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    pstats.Stats(profiler).sort_stats("tottime").print_stats(top)


def _torch_profile(fns: dict[str, Callable[[], object]], calls: int, top: int, cuda: bool) -> None:
    """torch.profiler's host events over `calls` calls of each contender, by self CPU time: on a
    GPU, with the CUDA runtime's calls (launches, allocations, copies, synchronizations) among them."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for name, fn in fns.items():
        for _ in range(20):
            fn()
        sync()
        # Each call's wall time, the device waited for (as the suite's rows time it), unprofiled.
        walls = []
        for _ in range(calls):
            start = time.perf_counter()
            fn()
            sync()
            walls.append(time.perf_counter() - start)
        with torch.profiler.profile(activities=activities) as prof:
            for _ in range(calls):
                fn()
            sync()
        print(f"\n{name}: {calls} calls, median wall time {statistics.median(walls) * 1e6:.1f} us a call "
              f"(device waited for); host events by self CPU time\n")
        averages = prof.key_averages()
        print(averages.table(sort_by="self_cpu_time_total", row_limit=top))
        if cuda:  # and where the device's time goes: the kernels' own
            print(f"\n{name}: the same calls' events by self device time\n")
            print(averages.table(sort_by="self_device_time_total", row_limit=top))


def _load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=1000, help="elements per tensor")
    parser.add_argument("--tensors", type=int, default=1, help="tensors per list")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--blocks", type=int, default=30)
    parser.add_argument("--calls", type=int, default=200, help="calls per block")
    parser.add_argument("--interleaved", action="store_true")
    parser.add_argument("--rounds", type=int, default=400)
    parser.add_argument("--torchopt", action="store_true", help="TorchOpt's contenders in the rotation")
    parser.add_argument("--shuffle", action="store_true", help="each round in a random order, not rotated")
    parser.add_argument("--after", help="a contender called, untimed, before every sample of the others "
                        "(e.g. 'torchopt scale_by_adam': every contender then starts as cold as ours in the suite)")
    parser.add_argument("--first", default="fused_optim", help="the contender that the rotation starts from "
                        "(fused_optim, as in the suite: it then follows TorchOpt's last contender)")
    parser.add_argument("--cprofile", action="store_true")
    parser.add_argument("--torch-profile", action="store_true",
                        help="torch.profiler's host events of fused_optim and op-by-op (--calls calls each)")
    parser.add_argument("--device", default="cpu", help="where the tensors live (cuda: a GPU's host costs)")
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    p = _problem(args.size, args.tensors, args.device)
    print(f"adam_direction forward + backward, {args.tensors} x {args.size}, {args.threads} thread(s), "
          f"fused_optim at {Path(ops.__file__).parent}")
    if args.torch_profile:
        fns = _contenders(p, False)
        _torch_profile({k: fns[k] for k in ("fused_optim", "op-by-op")}, args.calls, args.top,
                       args.device.startswith("cuda"))
    elif args.cprofile:
        _cprofile(_contenders(p, False)["fused_optim"], 3000, args.top)
    elif args.interleaved:
        fns = _contenders(p, args.torchopt or args.after is not None)
        after = fns.pop(args.after) if args.after else None
        if not args.torchopt:
            fns = {k: v for k, v in fns.items() if not k.startswith("torchopt")}
        fns = {args.first: fns.pop(args.first), **fns}
        _interleaved(fns, args.rounds, args.shuffle, after)
    else:
        _layers(p, args.blocks, args.calls)


if __name__ == "__main__":
    main()
