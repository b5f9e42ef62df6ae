"""fused-optim against torch.optim and TorchOpt, in one run.

Part 1 times one ``optimizer.step()`` on (a) 200 tensors of 1k elements, (b) 4 tensors of 4M
elements and (c) a medium MLP, for torch.optim's default (foreach), ``foreach=False``,
``fused=True`` (where torch has it) and ``fused_optim``. Part 2 times the differentiable Adam
update, forward + backward, against op-by-op PyTorch and TorchOpt's accelerated Adam op (when
``torchopt`` is importable and its op is available).

Every figure is the median of many repeats after a warm-up, with ``torch.set_num_threads`` set
by ``--threads`` (default 2). Ratios are time(peer) / time(fused_optim): above 1 means we win.

    python benchmarks/optim/bench_optim.py [--quick] [--threads 2] [--compiled] [--device cuda]

The tables (stdout) are markdown; a progress bar runs on stderr (``--no-progress`` or
``NO_PROGRESS=1`` turns it off) and a summary of the ratios against the targets closes the run.
"""

# ruff: noqa: B023  (each closure is timed within the loop iteration that defines it)
from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

import fused_optim
from fused_optim import _reference
from fused_optim import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _report  # benchmarks/_report.py: the progress bar and the summary table

# Where the tensors live (--device); CUDA timings wait for the GPU before reading the clock.
DEVICE = torch.device("cpu")


def sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize(DEVICE)


def median_times(fns: list[Callable[[], object]], repeats: int, warmup: int = 3) -> list[float]:
    """Median time of each callable; the callables run interleaved, round after round, so that a
    burst of load on a shared machine hits every candidate alike."""
    for fn in fns:
        for _ in range(warmup):
            fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, ts in zip(fns, times):
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            ts.append(time.perf_counter() - t0)
    return [statistics.median(ts) for ts in times]


def fmt(seconds: float) -> str:
    return f"{seconds * 1e6:.0f} us" if seconds < 1e-2 else f"{seconds * 1e3:.2f} ms"


def markdown_row(cells: list[str] | tuple[str, ...]) -> str:
    return "| " + " | ".join(cells) + " |"


# --- part 1: step() ---------------------------------------------------------------------------

def shapes_many_small() -> list[tuple[int, ...]]:
    return [(1000,)] * 200


def shapes_few_large() -> list[tuple[int, ...]]:
    return [(4_000_000,)] * 4


def shapes_mlp() -> list[tuple[int, ...]]:
    # 784-1024-1024-1024-10 MLP: ~2.9M parameters in 8 tensors.
    dims = [784, 1024, 1024, 1024, 10]
    out: list[tuple[int, ...]] = []
    for a, b in itertools.pairwise(dims):
        out += [(b, a), (b,)]
    return out


OPTIMIZERS = {
    "Adam": dict(lr=1e-3),
    "AdamW": dict(lr=1e-3, weight_decay=1e-2),
    "SGD": dict(lr=1e-2, momentum=0.9),
    "Adagrad": dict(lr=1e-2),
    "RMSprop": dict(lr=1e-2),  # torch has no fused RMSprop
    "Adadelta": dict(lr=1.0),  # nor Adadelta, Adamax or RAdam
    "Adamax": dict(lr=2e-3),
    "RAdam": dict(lr=1e-3),
}


def make_step(make: Callable[[list[torch.Tensor]], torch.optim.Optimizer],
              shapes: list[tuple[int, ...]]) -> Callable[[], object]:
    gen = torch.Generator().manual_seed(0)
    params = [torch.randn(s, generator=gen).to(DEVICE).requires_grad_() for s in shapes]
    for p in params:
        p.grad = (torch.randn(p.shape, generator=gen) * 1e-3).to(DEVICE)
    return make(params).step


def torch_has_fused(torch_cls: type[torch.optim.Optimizer]) -> bool:
    """Whether torch has a fused=True path for this optimizer on DEVICE (none for RMSprop; some
    are CPU-only), found by one step on a probe tensor."""
    probe = torch.zeros(2, device=DEVICE, requires_grad=True)
    probe.grad = torch.ones_like(probe)
    try:
        torch_cls([probe], fused=True).step()
    except (TypeError, RuntimeError, ValueError):
        return False
    return True


def bench_steps(quick: bool, no_progress: bool = False, only_small: bool = False) -> list[_report.Comparison]:
    """Prints the step() table row by row; returns the ratios against issue 3's targets."""
    cases = [("200 x 1k", shapes_many_small(), 200), ("4 x 4M", shapes_few_large(), 10),
             ("MLP 2.9M", shapes_mlp(), 30)][:1 if only_small else 3]
    names = ["Adam", "SGD"] if quick else list(OPTIMIZERS)
    vs_foreach = _report.Comparison("step(): foreach / fused_optim", 2.0, scope="200 x 1k")
    vs_loop = _report.Comparison("step(): foreach=False / fused_optim")
    vs_fused = _report.Comparison("step(): fused=True / fused_optim", 1.0)
    bar = _report.progress(desc="step()", total=len(names) * len(cases),
                           no_progress=no_progress)
    for name in names:
        kw = OPTIMIZERS[name]
        torch_cls, ours_cls = getattr(torch.optim, name), getattr(fused_optim, name)
        for label, shapes, repeats in cases:
            bar.set_postfix_str(f"{name} {label}")
            repeats = max(3, repeats // (4 if quick else 1))
            has_fused = torch_has_fused(torch_cls)
            steps = [make_step(lambda p: ours_cls(p, **kw), shapes),
                     make_step(lambda p: torch_cls(p, foreach=True, **kw), shapes),
                     make_step(lambda p: torch_cls(p, foreach=False, **kw), shapes)]
            if has_fused:
                steps.append(make_step(lambda p: torch_cls(p, fused=True, **kw), shapes))
            ours, foreach, loop, *rest = median_times(steps, repeats)
            fused = rest[0] if has_fused else None
            _report.write(markdown_row((
                name, label, fmt(ours), fmt(foreach), f"{foreach / ours:.2f}", fmt(loop),
                f"{loop / ours:.2f}", fmt(fused) if fused else "n/a",
                f"{fused / ours:.2f}" if fused else "n/a")))
            row = f"{name} {label}"
            vs_foreach.add(row, foreach / ours, targeted=label == "200 x 1k")
            vs_loop.add(row, loop / ours)
            vs_fused.add(row, fused / ours if fused else None)
            bar.update()
    bar.close()
    return [vs_foreach, vs_loop, vs_fused]


# --- part 1b (opt-in, --compiled): torch.compile of step() ------------------------------------

def bench_compiled(quick: bool, no_progress: bool = False) -> list[_report.Comparison]:
    """torch.compile(opt.step) (default inductor backend) of fused_optim.Adam against the same of
    torch.optim.Adam (foreach), with the eager steps of both fused implementations beside them."""
    cases = [("200 x 1k", shapes_many_small(), 50), ("MLP 2.9M", shapes_mlp(), 20)]
    vs_compiled = _report.Comparison("compiled step(): torch.compile(torch Adam) / compiled fused_optim")
    bar = _report.progress(desc="compiled step()", total=len(cases), no_progress=no_progress)
    for label, shapes, repeats in cases:
        bar.set_postfix_str(f"Adam {label} (compiling)")
        ours = torch.compile(make_step(lambda p: fused_optim.Adam(p, lr=1e-3), shapes))
        theirs = torch.compile(make_step(lambda p: torch.optim.Adam(p, lr=1e-3), shapes))
        eager_fused = make_step(lambda p: torch.optim.Adam(p, lr=1e-3, fused=True), shapes)
        eager_ours = make_step(lambda p: fused_optim.Adam(p, lr=1e-3), shapes)
        t_ours, t_theirs, t_fused, t_eager = median_times([ours, theirs, eager_fused, eager_ours],
                                                          max(5, repeats // (4 if quick else 1)))
        _report.write(markdown_row(("Adam", label, fmt(t_ours), fmt(t_theirs), f"{t_theirs / t_ours:.2f}",
                                    fmt(t_fused), fmt(t_eager))))
        vs_compiled.add(f"Adam {label}", t_theirs / t_ours)
        bar.update()
    bar.close()
    return [vs_compiled]


# --- part 2: differentiable forward + backward -------------------------------------------------

def torchopt_adam_op():
    try:
        import torchopt
        from torchopt.accelerated_op import adam_op
    except Exception as exc:
        return None, f"torchopt not importable ({type(exc).__name__}: {exc})"
    available = getattr(torchopt, "accelerated_op_available", lambda *a, **k: True)
    try:
        ok = available(torch.device("cpu"))
    except TypeError:
        ok = available()
    if not ok:
        return None, f"torchopt {torchopt.__version__}: accelerated op unavailable for this torch"
    try:
        from torchopt._C import adam_op as compiled  # noqa: F401
        kind = "compiled _C kernels"
    except ImportError as exc:
        kind = f"pure-PyTorch fallback, its compiled _C does not load with torch {torch.__version__}: {exc}"[:200]
    return adam_op.AdamOp, f"torchopt {torchopt.__version__} AdamOp ({kind})"


def torchopt_scale_by_adam():
    """TorchOpt's differentiable Adam transform without the accelerated op (plain torch ops)."""
    try:
        import torchopt
    except Exception:
        return None
    return torchopt.transform.scale_by_adam


def bench_differentiable(quick: bool,
                         no_progress: bool = False) -> tuple[list[_report.Comparison], str]:
    """Prints the forward + backward table row by row; returns the ratios and the peer's note."""
    b1, b2, eps = 0.9, 0.999, 1e-8
    adam_op_cls, peer_note = torchopt_adam_op()
    scale_by_adam = torchopt_scale_by_adam()
    cases = [("1 x 1e3", [1000]), ("1 x 1e5", [100_000]), ("1 x 1e7", [10_000_000]),
             ("50 x 2e3", [2000] * 50), ("50 x 2e5", [200_000] * 50)]
    if quick:
        cases = cases[:2] + cases[3:4]
    vs_op_by_op = _report.Comparison("fwd+bwd: op-by-op torch / fused_optim", 2.0)
    vs_adam_op = _report.Comparison("fwd+bwd: TorchOpt AdamOp / fused_optim", 1.3)
    vs_scale_by_adam = _report.Comparison("fwd+bwd: TorchOpt scale_by_adam / fused_optim")
    bar = _report.progress(desc="differentiable Adam", total=len(cases), no_progress=no_progress)
    for label, sizes in cases:
        bar.set_postfix_str(label)
        gen = torch.Generator().manual_seed(0)
        grads = [torch.randn(n, generator=gen).to(DEVICE).requires_grad_() for n in sizes]
        mus = [torch.randn(n, generator=gen).mul_(0.01).to(DEVICE).requires_grad_() for n in sizes]
        nus = [torch.rand(n, generator=gen).mul_(1e-4).to(DEVICE).requires_grad_() for n in sizes]
        weights = [torch.randn(n, generator=gen).to(DEVICE) for n in sizes]
        leaves = grads + mus + nus
        total = sum(sizes)
        repeats = 5 if total >= 5_000_000 else 30

        def loss_of(directions):
            return sum((d * w).sum() for d, w in zip(directions, weights))

        def ours():
            d, _, _ = F.adam_direction(grads, mus, nus, 3, beta1=b1, beta2=b2, eps=eps)
            torch.autograd.grad(loss_of(d), leaves)

        def op_by_op():
            d, _, _ = _reference.adam_direction(grads, mus, nus, step=3, beta1=b1, beta2=b2, eps=eps, eps_root=0.0)
            torch.autograd.grad(loss_of(d), leaves)

        fns = [ours, op_by_op]
        if adam_op_cls is not None:
            op = adam_op_cls(b1=b1, b2=b2, eps=eps, eps_root=0.0, inplace=False)
            count = torch.tensor(3)

            def peer():
                outs = [op(m, v, g, count) for g, m, v in zip(grads, mus, nus)]
                torch.autograd.grad(loss_of([o[2] for o in outs]), leaves)

            fns.append(peer)
        if scale_by_adam is not None:
            tx = scale_by_adam(b1=b1, b2=b2, eps=eps, eps_root=0.0, moment_requires_grad=True)
            state = tx.init(grads)
            state = state._replace(mu=type(state.mu)(mus), nu=type(state.nu)(nus))

            def peer_plain():
                updates, _ = tx.update(grads, state, inplace=False)
                torch.autograd.grad(loss_of(updates), leaves)

            fns.append(peer_plain)
        t_ours, t_ref, *peers = median_times(fns, repeats)
        row = [label, fmt(t_ours), fmt(t_ref), f"{t_ref / t_ours:.2f}"]
        vs_op_by_op.add(label, t_ref / t_ours)
        if adam_op_cls is not None:
            t_peer = peers.pop(0)
            row += [fmt(t_peer), f"{t_peer / t_ours:.2f}"]
            vs_adam_op.add(label, t_peer / t_ours)
        else:
            row += ["n/a", "n/a"]
        if scale_by_adam is not None:
            t_plain = peers.pop(0)
            row += [fmt(t_plain), f"{t_plain / t_ours:.2f}"]
            vs_scale_by_adam.add(label, t_plain / t_ours)
        else:
            row += ["n/a", "n/a"]
        _report.write(markdown_row(row))
        bar.update()
    bar.close()
    return [vs_op_by_op, vs_adam_op, vs_scale_by_adam], peer_note


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer optimizers, shapes and repeats")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-step", action="store_true")
    parser.add_argument("--skip-diff", action="store_true")
    parser.add_argument("--only-small", action="store_true", help="step(): only the 200 x 1k case (dispatch cost)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (timed with torch.cuda.synchronize)")
    parser.add_argument("--compiled", action="store_true",
                        help="also time torch.compile(step) (inductor; compiling takes minutes)")
    _report.add_progress_flag(parser)
    args = parser.parse_args(argv)
    global DEVICE
    DEVICE = torch.device(args.device)
    torch.set_num_threads(args.threads)
    where = torch.cuda.get_device_name(DEVICE) if DEVICE.type == "cuda" else f"threads {torch.get_num_threads()}"
    print(f"torch {torch.__version__}, fused_optim {fused_optim.__version__}, device {DEVICE} ({where}), "
          f"build {fused_optim.BUILD_INFO}")
    comparisons: list[_report.Comparison] = []
    if not args.skip_step:
        print("\n## step(): median time, ratio = torch / fused_optim (>1: fused_optim faster)\n")
        header = ("optimizer", "shapes", "fused_optim", "foreach", "ratio", "foreach=False", "ratio",
                  "fused=True", "ratio")
        print(markdown_row(header))
        print(markdown_row(["---"] * len(header)), flush=True)
        comparisons += bench_steps(args.quick, args.no_progress, args.only_small)
    if args.compiled:
        print("\n## torch.compile(step): median time, ratio = compiled torch / compiled fused_optim\n")
        header = ("optimizer", "shapes", "compiled fused_optim", "compiled torch (foreach)", "ratio",
                  "eager torch fused=True", "eager fused_optim")
        print(markdown_row(header))
        print(markdown_row(["---"] * len(header)), flush=True)
        comparisons += bench_compiled(args.quick, args.no_progress)
    if not args.skip_diff:
        print("\n## differentiable Adam direction, forward + backward (grads, exp_avgs, exp_avg_sqs)\n")
        header = ("tensors", "fused_optim", "op-by-op torch", "ratio", "TorchOpt AdamOp (accelerated)",
                  "ratio", "TorchOpt scale_by_adam (plain torch)", "ratio")
        print(markdown_row(header))
        print(markdown_row(["---"] * len(header)), flush=True)
        diff_comparisons, note = bench_differentiable(args.quick, args.no_progress)
        comparisons += diff_comparisons
        print(f"\n(peer: {note})")
    if comparisons:
        print()
        print(_report.summary_table(comparisons, title="Summary against issue 3's targets",
                                    note="ratio = peer time / fused_optim time; above 1: "
                                    "fused_optim is faster"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
