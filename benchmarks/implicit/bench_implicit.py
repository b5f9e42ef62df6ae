"""Implicit vs unrolled hyper-gradients: time and peak memory at the same accuracy.

The inner problem is iMAML's proximal regression (Rajeswaran et al. 2019): an MLP ``phi`` fitted
to a task by ``T`` gradient-descent steps on ``mse(phi) + lam/2 ||phi - theta||^2``, started at
``theta``; the hyper-gradient is that of a validation loss with respect to ``theta``.

* unrolled: the ``T`` steps are differentiated through (``create_graph=True``), so the graph and
  its memory grow with ``T``;
* implicit: the same ``T`` steps run without a graph inside
  :func:`diffopt.diff.implicit.custom_root` and the backward pass solves the Hessian system with
  ``K`` conjugate-gradient iterations
  (Hessian-vector products), whose memory does not depend on ``T``.

Accuracy is the relative error against a float64 reference (the inner problem solved to a
gradient norm of 1e-10, then an exact CG solve). ``K`` is the smallest of ``CG_GRID`` whose
error is no larger than the unrolled one at the same ``T`` ("the same accuracy"). Time is the
best of ``--repeats`` runs of a full hyper-gradient (inner loop + meta-gradient) after one warm-up,
in one process with ``--threads`` threads (1 by default: the 2-core CI machine is shared, and one
thread gives stable figures); peak memory is the growth of the resident set's high-water mark
(``VmHWM``, reset through ``/proc/self/clear_refs``) during one hyper-gradient, each measured in a
fresh subprocess.

When TorchOpt is importable (the benchmarks' nox session), the same implicit hyper-gradient is
also timed through ``torchopt.diff.implicit.custom_root``, and a last table compares the
``'forward'`` zero-order estimators of diffopt and TorchOpt on a quadratic as samples grow.

Run: ``.venv/bin/python benchmarks/implicit/bench_implicit.py`` (``--quick`` for a smoke run).
The tables (stdout) are markdown; a progress bar over the values of ``T`` runs on stderr
(``--no-progress`` or ``NO_PROGRESS=1`` turns it off), and a summary against issue 4's targets
closes the run.
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import torch

from diffopt import linear_solve
from diffopt.diff.implicit import custom_root
from diffopt.diff.zero_order import zero_order

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _report  # benchmarks/_report.py: the progress bar and the summary table

try:  # the peer, present only in the benchmarks' nox session
    import torchopt
except ImportError:
    torchopt = None

LAM = 1.0
LR = 0.1
CG_GRID = (2, 4, 8, 12, 16, 24, 32, 48, 64)


def make_problem(dtype=torch.float32, n=512, d=32, hidden=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, d, generator=g)
    X_val = torch.randn(n, d, generator=g)
    teacher = torch.randn(d, generator=g) / d**0.5
    y = torch.sin(3 * X @ teacher) + 0.1 * torch.randn(n, generator=g)
    y_val = torch.sin(3 * X_val @ teacher)
    theta = [
        torch.randn(hidden, d, generator=g) / d**0.5,
        torch.zeros(hidden),
        torch.randn(1, hidden, generator=g) / hidden**0.5,
        torch.zeros(1),
    ]
    to = lambda t: t.to(dtype)  # noqa: E731
    return {
        "data": (to(X), to(y)),
        "val": (to(X_val), to(y_val)),
        "theta": [to(t).requires_grad_() for t in theta],
    }


def mlp(params, X):
    W1, b1, W2, b2 = params
    return (torch.tanh(X @ W1.T + b1) @ W2.T + b2).squeeze(-1)


def inner_loss(phi, theta, data):
    X, y = data
    prox = sum((p - t).pow(2).sum() for p, t in zip(phi, theta))
    return (mlp(phi, X) - y).pow(2).mean() + 0.5 * LAM * prox


def outer_loss(phi, val):
    X, y = val
    return (mlp(phi, X) - y).pow(2).mean()


def unrolled_hypergradient(problem, steps):
    theta, data = problem["theta"], problem["data"]
    phi = list(theta)
    for _ in range(steps):
        grads = torch.autograd.grad(inner_loss(phi, theta, data), phi, create_graph=True)
        phi = [p - LR * g for p, g in zip(phi, grads)]
    return torch.autograd.grad(outer_loss(phi, problem["val"]), theta)


def optimality(phi, theta, data):
    """The optimality condition, the inner gradient, as diffopt users write it (autograd)."""
    with torch.enable_grad():
        phi = [p if p.requires_grad else p.detach().requires_grad_() for p in phi]
        return tuple(torch.autograd.grad(inner_loss(phi, theta, data), phi, create_graph=True))


# TorchOpt differentiates the optimality condition under functorch, which needs torch.func.
functional_optimality = torch.func.grad(inner_loss, argnums=0)


def gradient_descent(phi, theta, data, steps):
    phi = [p.detach().clone() for p in phi]
    for _ in range(steps):
        with torch.enable_grad():
            for p in phi:
                p.requires_grad_(True)
            grads = torch.autograd.grad(inner_loss(phi, theta, data), phi)
        with torch.no_grad():
            phi = [p.sub_(LR * g).detach() for p, g in zip(phi, grads)]
    return tuple(phi)


def implicit_hypergradient(problem, steps, cg_iterations):
    theta, data = problem["theta"], problem["data"]

    @custom_root(
        optimality, argnums=1, solve=linear_solve.solve_cg(maxiter=cg_iterations, rtol=0.0)
    )
    def solver(phi0, theta, data):
        return gradient_descent(phi0, theta, data, steps)

    phi = solver(tuple(t.detach() for t in theta), theta, data)
    return torch.autograd.grad(outer_loss(phi, problem["val"]), theta)


def torchopt_hypergradient(problem, steps, cg_iterations):
    """The same implicit hyper-gradient through TorchOpt's custom_root and CG."""
    theta, data = problem["theta"], problem["data"]

    @torchopt.diff.implicit.custom_root(
        functional_optimality,
        argnums=1,
        solve=torchopt.linear_solve.solve_cg(maxiter=cg_iterations, rtol=0.0),
    )
    def solver(phi0, theta, data):
        return gradient_descent(phi0, theta, data, steps)

    phi = solver(tuple(t.detach() for t in theta), tuple(theta), data)
    return torch.autograd.grad(outer_loss(phi, problem["val"]), theta)


def zero_order_forward_check(num_samples=(100, 1000, 10000)):
    """Relative error of the 'forward' ES estimator on a quadratic, diffopt vs TorchOpt.

    Prints a markdown table; returns ``(samples, diffopt error, TorchOpt error)`` rows.
    """
    g = torch.Generator().manual_seed(0)
    A = torch.randn(4, 4, generator=g, dtype=torch.float64)
    A = A @ A.T / 4 + torch.eye(4, dtype=torch.float64)
    b = torch.randn(4, generator=g, dtype=torch.float64)
    theta0 = torch.tensor([0.5, -1.0, 0.25, 1.5], dtype=torch.float64)
    true_gradient = A @ theta0 + b  # Gaussian smoothing keeps a quadratic's gradient

    def f(theta):
        return 0.5 * theta @ A @ theta + b @ theta + 5.0

    def error(decorator, n):
        torch.manual_seed(n)
        theta = theta0.clone().requires_grad_()
        (grad,) = torch.autograd.grad(decorator(f)(theta), theta)
        return float(torch.linalg.norm(grad - true_gradient) / torch.linalg.norm(true_gradient))

    normal = torch.distributions.Normal(torch.tensor(0.0, dtype=torch.float64), 1.0)
    print("\n'forward' zero-order estimator on a quadratic, sigma=0.5: relative gradient error\n")
    print(f"| {'samples':>8} | {'diffopt':>8} | {'TorchOpt':>8} |")
    print("|---------:|---------:|---------:|")
    rows = []
    for n in num_samples:
        ours = error(zero_order(normal, method="forward", num_samples=n, sigma=0.5), n)
        peer = float("nan")
        if torchopt is not None:
            peer = error(
                torchopt.diff.zero_order.zero_order(
                    normal, method="forward", num_samples=n, sigma=0.5
                ),
                n,
            )
        print(f"| {n:>8} | {ours:>8.3f} | {peer:>8.3f} |", flush=True)
        rows.append((n, ours, peer))
    return rows


def reference_hypergradient():
    problem = make_problem(torch.float64)
    theta, data = problem["theta"], problem["data"]

    @custom_root(optimality, argnums=1, solve=linear_solve.solve_cg(rtol=1e-12))
    def solver(phi0, theta, data):
        phi = list(phi0)
        for _ in range(20):  # 20 x 500 steps, stopping once the gradient has vanished
            phi = list(gradient_descent(phi, theta, data, 500))
            grads = optimality(tuple(phi), theta, data)
            if torch.sqrt(sum(g.pow(2).sum() for g in grads)) < 1e-10:
                break
        return tuple(p.detach() for p in phi)

    phi = solver(tuple(t.detach() for t in theta), theta, data)
    return torch.autograd.grad(outer_loss(phi, problem["val"]), theta)


def relative_error(grads, reference):
    num = sum((g.double() - r).pow(2).sum() for g, r in zip(grads, reference))
    den = sum(r.pow(2).sum() for r in reference)
    return float(torch.sqrt(num / den))


def best_time(fn, repeats):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _status_mib(key):
    with open("/proc/self/status") as status:
        return int(re.search(rf"{key}:\s+(\d+)", status.read()).group(1)) / 1024.0


def peak_memory_child(method, steps, cg_iterations):
    """In a fresh process: MiB by which one hyper-gradient raises the resident high-water mark."""
    problem = make_problem()
    gradient_descent(problem["theta"], problem["theta"], problem["data"], 1)  # warm the allocator
    before = _status_mib("VmRSS")
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")  # reset VmHWM to the current resident set
    if method == "unrolled":
        unrolled_hypergradient(problem, steps)
    else:
        implicit_hypergradient(problem, steps, cg_iterations)
    return _status_mib("VmHWM") - before


def peak_memory(method, steps, cg_iterations, threads):
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--threads",
            str(threads),
            "--child",
            method,
            str(steps),
            str(cg_iterations),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[25, 50, 100, 200])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument("--quick", action="store_true", help="a fast smoke run")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    _report.add_progress_flag(parser)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.child:
        method, steps, cg_iterations = args.child
        print(json.dumps(peak_memory_child(method, int(steps), int(cg_iterations))))
        return
    if args.quick:
        args.steps, args.repeats = [10, 20], 1
    torch.manual_seed(0)
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; MLP 32-256-1 on 512 "
        f"points, lam={LAM}, lr={LR}, float32",
        flush=True,
    )
    reference = reference_hypergradient()
    problem = make_problem()
    rows = []
    columns = [("T", 4), ("unrolled s", 10), ("unrolled MiB", 12), ("unrolled rel. err", 17),
               ("K", 3), ("diffopt implicit s", 18), ("implicit MiB", 12),
               ("implicit rel. err", 17), ("speed-up", 8), ("memory ratio", 12),
               ("TorchOpt implicit s", 19), ("TorchOpt rel. err", 17)]
    print("\n| " + " | ".join(f"{name:>{width}}" for name, width in columns) + " |")
    print("|" + "|".join("-" * (width + 1) + ":" for _, width in columns) + "|", flush=True)
    bar = _report.progress(desc="implicit vs unrolled", total=len(args.steps),
                           no_progress=args.no_progress)
    for steps in args.steps:
        bar.set_postfix_str(f"T={steps}: accuracy")
        unrolled_error = relative_error(unrolled_hypergradient(problem, steps), reference)
        for cg_iterations in CG_GRID:
            implicit_error = relative_error(
                implicit_hypergradient(problem, steps, cg_iterations), reference
            )
            if implicit_error <= unrolled_error:
                break
        bar.set_postfix_str(f"T={steps}, K={cg_iterations}: timing")
        unrolled_time = best_time(
            functools.partial(unrolled_hypergradient, problem, steps), args.repeats
        )
        implicit_time = best_time(
            functools.partial(implicit_hypergradient, problem, steps, cg_iterations), args.repeats
        )
        torchopt_time = torchopt_error = float("nan")
        if torchopt is not None:
            torchopt_error = relative_error(
                torchopt_hypergradient(problem, steps, cg_iterations), reference
            )
            torchopt_time = best_time(
                functools.partial(torchopt_hypergradient, problem, steps, cg_iterations),
                args.repeats,
            )
        bar.set_postfix_str(f"T={steps}, K={cg_iterations}: memory")
        unrolled_mem = peak_memory("unrolled", steps, 0, args.threads)
        implicit_mem = peak_memory("implicit", steps, cg_iterations, args.threads)
        row = {
            "T": steps,
            "unrolled_s": unrolled_time,
            "unrolled_mib": unrolled_mem,
            "unrolled_err": unrolled_error,
            "K": cg_iterations,
            "implicit_s": implicit_time,
            "implicit_mib": implicit_mem,
            "implicit_err": implicit_error,
            "torchopt_s": torchopt_time,
            "torchopt_err": torchopt_error,
        }
        rows.append(row)
        _report.write(
            f"| {steps:>4} | {unrolled_time:>10.3f} | {unrolled_mem:>12.1f} | "
            f"{unrolled_error:>17.1e} | {cg_iterations:>3} | {implicit_time:>18.3f} | "
            f"{implicit_mem:>12.1f} | {implicit_error:>17.1e} | "
            f"{unrolled_time / implicit_time:>7.1f}x | "
            f"{unrolled_mem / max(implicit_mem, 1e-9):>11.1f}x | {torchopt_time:>19.3f} | "
            f"{torchopt_error:>17.1e} |"
        )
        bar.update()
    bar.close()
    zero_order = zero_order_forward_check((100, 1000) if args.quick else (100, 1000, 10000))
    print()
    print(summary(rows, zero_order))
    return rows


def summary(rows, zero_order) -> str:
    """Issue 4's targets (>= 5x faster at T=100, memory flat in T) and the peers' ratios."""
    speed = _report.Comparison("time: unrolled / implicit, same accuracy", 5.0, scope="T=100")
    memory = _report.Comparison("peak MiB: unrolled / implicit")
    peer = _report.Comparison("time: TorchOpt implicit / diffopt implicit")
    estimator = _report.Comparison("'forward' ES error: TorchOpt / diffopt")
    for row in rows:
        label = f"T={row['T']}"
        speed.add(label, row["unrolled_s"] / row["implicit_s"], targeted=row["T"] == 100)
        memory.add(label, row["unrolled_mib"] / max(row["implicit_mib"], 1e-9))
        peer.add(label, row["torchopt_s"] / row["implicit_s"])
    for samples, ours, theirs in zero_order:
        estimator.add(f"{samples} samples", theirs / ours)
    table = _report.summary_table(
        [speed, memory, peer, estimator], title="Summary against issue 4's targets",
        note="ratio = peer / diffopt implicit in time, memory or error; above 1: diffopt "
        "implicit is better")
    implicit = [row["implicit_mib"] for row in rows]
    unrolled = [row["unrolled_mib"] for row in rows]
    if rows:
        table += (f"\nPeak memory over T = {', '.join(str(row['T']) for row in rows)}: implicit "
                  f"{min(implicit):.1f}-{max(implicit):.1f} MiB, unrolled "
                  f"{min(unrolled):.1f}-{max(unrolled):.1f} MiB.")
    return table


if __name__ == "__main__":
    main()
