"""Host time of one optimizer step: how long ``step()`` keeps the CPU busy, apart from the device.

On a GPU a step is host-bound when its tensors are many and small: the kernels finish in a few
microseconds and the Python, dispatch and launch work decides the step's speed. This times each
``step()`` call alone (the clock read on either side of the call, no synchronization inside the
timed window, so the device runs behind and its time is not counted) and, separately, the device
time per step (CUDA events around a burst of steps). Candidates: fused_optim (default and
``capturable=True``) against torch.optim's ``fused=True`` and foreach paths, on 200 tensors of 1k
elements (issue 23's target: fused_optim's host time at most 60 us, 9x under torch's fused).
Where torch.optim has no fused step on the device (NAdam, ASGD, Adafactor; Adagrad on CUDA under
torch 2.11) its foreach one is the reference.

    python benchmarks/optim/bench_host.py [--device cuda] [--steps 200] [--numel 1000] [--optimizers Adam AdamW SGD]
    python benchmarks/optim/bench_host.py --shape 32 32 --optimizers Adafactor   # 200 matrices: factored
    python benchmarks/optim/bench_host.py --device cuda --tensors 4 --numel 4194304 --dtype bfloat16
    python benchmarks/optim/bench_host.py --device cuda --mlp --optimizers SGD Adam   # bench_optim.py's MLP

``--numel 1`` leaves the element work out on the CPU too, where a step is synchronous; ``--shape``
gives each tensor a shape instead (Adafactor factors the second moment of 2-D ones).

Figures are medians over interleaved bursts; on the CPU "device time" is the same as host time.

``--cold MB`` writes a host buffer of that many megabytes before each timed step (outside its
clock), so that each step starts with its Python objects and tensor metadata out of the caches, as
it does after a forward and backward pass; the device column is then left out (the device waits
for the host's writes between steps).

``--device plan`` times the CUDA path's host work on a machine with no GPU: fused_optim's CUDA
launches emulated with ``FUSED_OPTIM_EMULATE_CUDA=plan`` (planned, their arguments filled, no block
run: the numbers are garbage), the tensors on the CPU. A step then costs what it costs the host on a
GPU, less the driver's launches and the CUDA allocator's share; torch's variants are left out.

The last column counts one step's kernel launches: on a GPU the device's kernels (and copies) that
torch.profiler records for a step of each candidate, so that device time can be read against them;
in plan mode fused_optim's planned launches (with the kernels that advance state scalars or device
step counters after them); "-" on the CPU.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

import torch
from bench_optim import shapes_mlp, torch_has_fused

import fused_optim
from fused_optim import _native

TENSORS = 200
KWARGS = {"Adam": dict(lr=1e-3), "AdamW": dict(lr=1e-3), "SGD": dict(lr=1e-3, momentum=0.9),
          "Adagrad": dict(lr=1e-3), "NAdam": dict(lr=1e-3), "ASGD": dict(lr=1e-3), "Adafactor": dict(lr=1e-2)}
CAPTURABLE = {"Adam", "AdamW", "NAdam", "ASGD", "Adafactor"}  # (torch.optim's SGD and Adagrad have no capturable option; its Adafactor neither, ours has)


def build(name: str, variant: str, device: str, shapes: list[tuple[int, ...]],
          dtype: torch.dtype) -> torch.optim.Optimizer:
    gen = torch.Generator().manual_seed(0)
    params = [torch.randn(shape, generator=gen).to(device, dtype) for shape in shapes]
    for p in params:
        p.grad = torch.randn(p.shape, generator=gen).to(device, dtype)
    kwargs = dict(KWARGS[name])
    if variant == "fused_optim":
        return getattr(fused_optim, name)(params, **kwargs)
    if variant == "fused_optim capturable":
        return getattr(fused_optim, name)(params, **kwargs, capturable=True)
    if variant == "torch fused=True":
        return getattr(torch.optim, name)(params, **kwargs, fused=True)
    return getattr(torch.optim, name)(params, **kwargs, foreach=True)


def host_and_device(opt: torch.optim.Optimizer, steps: int, cuda: bool,
                    flush: torch.Tensor | None = None) -> tuple[float, float]:
    """(median host seconds of one step() call, device seconds per step over the burst; NaN with
    ``flush``, a host buffer written before each step to push the step's data out of the caches)."""
    host = []
    if cuda:
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
    t_burst = time.perf_counter()
    for _ in range(steps):
        if flush is not None:
            flush.add_(1.0)
        t0 = time.perf_counter()
        opt.step()
        host.append(time.perf_counter() - t0)
    if cuda:
        end.record()
        torch.cuda.synchronize()
        device = start.elapsed_time(end) / 1e3 / steps
    else:
        device = (time.perf_counter() - t_burst) / steps
    return statistics.median(host), float("nan") if flush is not None else device


def launches(opt: torch.optim.Optimizer, cuda: bool, plan: bool) -> str:
    """One step's kernel launches (see the module's docstring), as the table prints them."""
    if plan:
        before = fused_optim._C._emulated_launches()
        opt.step()
        return str(fused_optim._C._emulated_launches() - before)
    if not cuda:
        return "-"
    torch.cuda.synchronize()
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            opt.step()
            torch.cuda.synchronize()
    except RuntimeError as e:  # (no CUPTI in this torch)
        print(f"no launch count: {e}", file=sys.stderr)
        return "?"
    return str(sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tensors", type=int, default=TENSORS)
    parser.add_argument("--numel", type=int, default=1000, help="elements per tensor")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16", "float64"])
    parser.add_argument("--shape", type=int, nargs="+", help="each tensor's shape (instead of --numel)")
    parser.add_argument("--mlp", action="store_true",
                        help="bench_optim.py's MLP (8 tensors, 2.9M elements) instead of --tensors and --shape")
    parser.add_argument("--optimizers", nargs="*", default=list(KWARGS))
    parser.add_argument("--cold", type=int, default=0, metavar="MB",
                        help="write a host buffer of MB megabytes before each timed step (cold caches)")
    args = parser.parse_args()
    plan = args.device == "plan"
    if plan and os.environ.get("FUSED_OPTIM_EMULATE_CUDA") != "plan":  # read when the library loads
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, "FUSED_OPTIM_EMULATE_CUDA": "plan"})
    on = "cpu" if plan else args.device  # where the tensors live
    shape = tuple(args.shape) if args.shape else (args.numel,)
    shapes = shapes_mlp() if args.mlp else [shape] * args.tensors
    what = "MLP 2.9M" if args.mlp else f"{args.tensors} x {'x'.join(map(str, shape))}"
    cuda = on == "cuda"
    where = torch.cuda.get_device_name() if cuda else f"{torch.get_num_threads()} threads"
    if plan:
        where += ", CUDA launches planned and not run"
    fast = _native.BUILD_INFO["eager"]
    print(f"torch {torch.__version__}, fused_optim {fused_optim.__version__} (fast path: {fast}"
          f"{'' if fast else '; ' + str(_native.EAGER_REASON)}), {args.device} ({where})")
    flush = torch.zeros(args.cold << 18) if args.cold > 0 else None  # (float32: 4 bytes each)
    if flush is not None:
        print(f"cold caches: {args.cold} MB written on the host before each timed step")
    print()
    dtype = getattr(torch, args.dtype)
    dtype_name = "" if dtype == torch.float32 else f" {args.dtype}"
    unit = "fused_optim" if plan else "torch fused (else foreach)"
    print(f"| optimizer, {what}{dtype_name} | variant | host us / step | "
          f"device us / step | {unit} host / this host | launches / step |")
    print("|---|---|---|---|---|---|")
    variants = ["fused_optim", "fused_optim capturable", "torch fused=True", "torch foreach"]
    for name in args.optimizers:
        fused = torch_has_fused(getattr(torch.optim, name), on)
        names = [v for v in variants if (name in CAPTURABLE or not v.endswith("capturable"))
                 and (fused or v != "torch fused=True") and not (plan and v.startswith("torch"))]
        reference = "fused_optim" if plan else "torch fused=True" if fused else "torch foreach"
        opts = {v: build(name, v, on, shapes, dtype) for v in names}
        for opt in opts.values():  # warm-up: state, plans, lazy inits
            for _ in range(5):
                opt.step()
        counts = {v: launches(opt, cuda, plan) for v, opt in opts.items()}
        samples: dict[str, list[tuple[float, float]]] = {v: [] for v in names}
        for r in range(args.rounds):  # interleaved, the order rotating each round
            order = names[r % len(names):] + names[:r % len(names)]
            for v in order:
                samples[v].append(host_and_device(opts[v], args.steps, cuda, flush))
        med = {v: (statistics.median(h for h, _ in s), statistics.median(d for _, d in s)) for v, s in samples.items()}
        for v in names:
            host, device = med[v]
            device_us = "-" if math.isnan(device) else f"{device * 1e6:.1f}"
            print(f"| {name} | {v} | {host * 1e6:.1f} | {device_us} | "
                  f"{med[reference][0] / host:.2f}x | {counts[v]} |", flush=True)


if __name__ == "__main__":
    main()
