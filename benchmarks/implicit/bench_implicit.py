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
error is no larger than the unrolled one at the same ``T`` ("the same accuracy"). Peak memory is
the growth of the resident set's high-water mark (``VmHWM``, reset through
``/proc/self/clear_refs``) during one hyper-gradient, each measured in a fresh subprocess
(``--child``).

When TorchOpt is importable (the benchmarks' nox session), the same implicit hyper-gradient is
also computed through ``torchopt.diff.implicit.custom_root``; ``--zero-order`` prints a table
comparing the ``'forward'`` zero-order estimators of diffopt and TorchOpt on a quadratic.

    python benchmarks/implicit/bench_implicit.py [--quick] [pytest options]    # the timings
    python benchmarks/implicit/bench_implicit.py --zero-order                  # the estimators

The first is ``pytest benchmarks/implicit/test_implicit.py`` (test_implicit.py, the
pytest-benchmark suite, times unrolled, diffopt's and TorchOpt's implicit hyper-gradients side
by side; see benchmarks/RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import torch

from diffopt import linear_solve
from diffopt.diff.implicit import custom_root
from diffopt.diff.zero_order import zero_order

try:  # the peer, present only in the benchmarks' nox session
    import torchopt
except ImportError:
    torchopt = None

LAM = 1.0
LR = 0.1
CG_GRID = (2, 4, 8, 12, 16, 24, 32, 48, 64)
# The linear solvers both libraries offer by these names: "cg" (CG on the Hessian, symmetric here)
# and "normal_cg" (CG on the normal equations, for any Jacobian: both custom_roots' default, and
# what TorchOpt's iMAML example uses), each taken from the library under test.
SOLVERS = {"cg": lambda library: library.solve_cg,
           "normal_cg": lambda library: library.solve_normal_cg}


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


def implicit_hypergradient(problem, steps, cg_iterations, solve="cg"):
    theta, data = problem["theta"], problem["data"]
    solver = SOLVERS[solve](linear_solve)(maxiter=cg_iterations, rtol=0.0)

    @custom_root(optimality, argnums=1, solve=solver)
    def solver(phi0, theta, data):
        return gradient_descent(phi0, theta, data, steps)

    phi = solver(tuple(t.detach() for t in theta), theta, data)
    return torch.autograd.grad(outer_loss(phi, problem["val"]), theta)


def torchopt_hypergradient(problem, steps, cg_iterations, solve="cg"):
    """The same implicit hyper-gradient through TorchOpt's custom_root and linear solver."""
    theta, data = problem["theta"], problem["data"]
    solver = SOLVERS[solve](torchopt.linear_solve)(maxiter=cg_iterations, rtol=0.0)

    @torchopt.diff.implicit.custom_root(functional_optimality, argnums=1, solve=solver)
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


def accuracy_matched(problem, steps, reference, solve="cg"):
    """The smallest ``K`` of ``CG_GRID`` whose implicit hyper-gradient (``solve``'s iterations)
    is as accurate as the unrolled one at ``T = steps``, and each method's relative error
    (TorchOpt's at that K)."""
    errors = {"unrolled": relative_error(unrolled_hypergradient(problem, steps), reference)}
    for cg_iterations in CG_GRID:
        errors["diffopt implicit"] = relative_error(
            implicit_hypergradient(problem, steps, cg_iterations, solve), reference)
        if errors["diffopt implicit"] <= errors["unrolled"]:
            break
    if torchopt is not None:
        errors["torchopt implicit"] = relative_error(
            torchopt_hypergradient(problem, steps, cg_iterations, solve), reference)
    return cg_iterations, errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument("--zero-order", action="store_true",
                        help="the 'forward' zero-order estimators' errors, diffopt vs TorchOpt")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    torch.set_num_threads(args.threads or 1)
    if args.child:
        method, steps, cg_iterations = args.child
        print(json.dumps(peak_memory_child(method, int(steps), int(cg_iterations))))
        return 0
    if args.zero_order:
        zero_order_forward_check()
        return 0
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import _suite

    threads = ["--threads", str(args.threads)] if args.threads else []
    return _suite.run_suite(Path(__file__).with_name("test_implicit.py"), [*threads, *rest])


if __name__ == "__main__":
    sys.exit(main())
