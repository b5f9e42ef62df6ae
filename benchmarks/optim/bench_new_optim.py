"""fused-optim's NAdam, Rprop, ASGD (and Adafactor where fused-optim has it) against torch.optim.

One ``optimizer.step()`` on 200 tensors of 1k elements (the target: at least 2x torch.optim's
default foreach path), 4 tensors of 4M elements and a medium MLP, for torch.optim with
``foreach=True`` (its default on CUDA; pass it explicitly on CPU too), ``foreach=False`` (torch's
CPU default) and ``fused_optim``; then the differentiable update, forward + backward, against the
same update written op by op in PyTorch (``fused_optim._reference``).

The timing helpers are bench_optim.py's (interleaved medians after a warm-up).

    python benchmarks/optim/bench_new_optim.py [--quick] [--threads 2] [--device cuda]
"""

# ruff: noqa: B023  (each closure is timed within the loop iteration that defines it)
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

import fused_optim
from fused_optim import _reference
from fused_optim import functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _report
import bench_optim as base

OPTIMIZERS = {
    "NAdam": dict(lr=1e-3),
    "NAdam (decoupled wd)": dict(lr=1e-3, weight_decay=1e-2, decoupled_weight_decay=True),
    "Rprop": dict(lr=1e-3),
    "ASGD": dict(lr=1e-2, weight_decay=1e-4),
    "Adafactor": dict(lr=1e-2),
}


def _class_name(name: str) -> str:
    return name.split(" ")[0]


def bench_steps(quick: bool, no_progress: bool) -> list[_report.Comparison]:
    cases = [("200 x 1k", base.shapes_many_small(), 200), ("4 x 4M", base.shapes_few_large(), 10),
             ("MLP 2.9M", base.shapes_mlp(), 30)]
    if quick:
        cases = cases[:1]
    names = [n for n in OPTIMIZERS if hasattr(fused_optim, _class_name(n))]
    vs_foreach = _report.Comparison("step(): foreach / fused_optim", 2.0, scope="200 x 1k")
    vs_loop = _report.Comparison("step(): foreach=False / fused_optim")
    bar = _report.progress(desc="step()", total=len(names) * len(cases), no_progress=no_progress)
    for name in names:
        kw = OPTIMIZERS[name]
        torch_cls, ours_cls = getattr(torch.optim, _class_name(name)), getattr(fused_optim, _class_name(name))
        for label, shapes, repeats in cases:
            bar.set_postfix_str(f"{name} {label}")
            steps = [base.make_step(lambda p: ours_cls(p, **kw), shapes),
                     base.make_step(lambda p: torch_cls(p, foreach=True, **kw), shapes),
                     base.make_step(lambda p: torch_cls(p, foreach=False, **kw), shapes)]
            ours, foreach, loop = base.median_times(steps, max(3, repeats // (4 if quick else 1)))
            _report.write(base.markdown_row((name, label, base.fmt(ours), base.fmt(foreach), f"{foreach / ours:.2f}",
                                             base.fmt(loop), f"{loop / ours:.2f}")))
            vs_foreach.add(f"{name} {label}", foreach / ours, targeted=label == "200 x 1k")
            vs_loop.add(f"{name} {label}", loop / ours)
            bar.update()
    bar.close()
    return [vs_foreach, vs_loop]


def _differentiable_cases():
    """(name, fused call, op-by-op call, number of state lists): each call maps (params, grads,
    states) to the output lists of one update."""
    def nadam(mod):
        def run(p, g, s):
            if mod is F:
                return F.nadam_update(p, g, s[0], s[1], 3, 0.1, lr=1e-3)[:3]
            return mod.nadam_update(p, g, s[0], s[1], step=3, mu_product=0.1, lr=1e-3, beta1=0.9, beta2=0.999,
                                    eps=1e-8, weight_decay=0.0, momentum_decay=4e-3, decoupled_weight_decay=False,
                                    maximize=False)
        return run

    def rprop(mod):
        kw = dict(etaminus=0.5, etaplus=1.2, step_size_min=1e-6, step_size_max=50.0, maximize=False)
        return lambda p, g, s: mod.rprop_update(p, g, s[0], s[1], **kw)

    def asgd(mod):
        kw = dict(eta=1e-2, mu=0.5, lambd=1e-4, weight_decay=0.0, maximize=False)
        if mod is F:
            return lambda p, g, s: F.asgd_update(p, g, s[0], **kw)
        return lambda p, g, s: mod.asgd_update(p, g, s[0], **kw)

    return [("NAdam", nadam(F), nadam(_reference), 2), ("Rprop", rprop(F), rprop(_reference), 2),
            ("ASGD", asgd(F), asgd(_reference), 1)]


def bench_differentiable(quick: bool, no_progress: bool) -> list[_report.Comparison]:
    cases = [("50 x 2e3", [2000] * 50), ("1 x 1e6", [1_000_000])]
    if quick:
        cases = cases[:1]
    updates = _differentiable_cases()
    vs_op_by_op = _report.Comparison("fwd+bwd: op-by-op torch / fused_optim")  # no target in issue 13
    bar = _report.progress(desc="differentiable updates", total=len(cases) * len(updates), no_progress=no_progress)
    for name, ours_fn, ref_fn, n_states in updates:
        for label, sizes in cases:
            bar.set_postfix_str(f"{name} {label}")
            gen = torch.Generator().manual_seed(0)

            def tensors(scale=1.0, positive=False):
                out = [torch.randn(n, generator=gen) * scale for n in sizes]
                return [(t.abs() + 1e-3 if positive else t).to(base.DEVICE).requires_grad_() for t in out]

            params, grads = tensors(), tensors()
            states = [tensors(0.01, positive=k > 0) for k in range(n_states)]
            weights = [torch.randn(n, generator=gen).to(base.DEVICE) for n in sizes]
            leaves = [t for lst in (params, grads, *states) for t in lst]

            def timed(fn):
                def run():
                    outs = fn(params, grads, states)
                    loss = sum((t * w).sum() for lst in outs for t, w in zip(lst, weights))
                    torch.autograd.grad(loss, leaves, allow_unused=True)
                return run

            t_ours, t_ref = base.median_times([timed(ours_fn), timed(ref_fn)], 5 if sum(sizes) >= 1e6 else 30)
            _report.write(base.markdown_row((name, label, base.fmt(t_ours), base.fmt(t_ref), f"{t_ref / t_ours:.2f}")))
            vs_op_by_op.add(f"{name} {label}", t_ref / t_ours)
            bar.update()
    bar.close()
    return [vs_op_by_op]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only 200 x 1k and 50 x 2e3, fewer repeats")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-diff", action="store_true")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (timed with torch.cuda.synchronize)")
    _report.add_progress_flag(parser)
    args = parser.parse_args(argv)
    base.DEVICE = torch.device(args.device)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, fused_optim {fused_optim.__version__}, device {base.DEVICE}, "
          f"threads {torch.get_num_threads()}")
    print("\n## step(): median time, ratio = torch / fused_optim (>1: fused_optim faster)\n")
    header = ("optimizer", "shapes", "fused_optim", "foreach=True", "ratio", "foreach=False", "ratio")
    print(base.markdown_row(header))
    print(base.markdown_row(["---"] * len(header)), flush=True)
    comparisons = bench_steps(args.quick, args.no_progress)
    if not args.skip_diff:
        print("\n## differentiable update, forward + backward through params, grads and state\n")
        header = ("optimizer", "tensors", "fused_optim", "op-by-op torch", "ratio")
        print(base.markdown_row(header))
        print(base.markdown_row(["---"] * len(header)), flush=True)
        comparisons += bench_differentiable(args.quick, args.no_progress)
    print()
    print(_report.summary_table(comparisons, title="Summary against issue 13's targets",
                                note="ratio = peer time / fused_optim time; above 1: fused_optim is faster"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
