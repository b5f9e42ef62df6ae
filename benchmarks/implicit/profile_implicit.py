"""Where an implicit hyper-gradient's time goes: the inner solver, then each library's backward.

bench_implicit.py's iMAML problem (MLP 32-256-1, 512 points, ``T`` gradient-descent steps, ``K``
CG iterations at the accuracy of unrolling): one round times, interleaved, the inner solver alone
(the ``T`` steps both libraries run as the user wrote them), diffopt's full hyper-gradient and
TorchOpt's. "backward" = full - inner solver: what ``custom_root`` and the linear solve cost,
the only part the library controls. Medians over rounds, 1 thread. ``--profile`` adds a cProfile
of each library's hyper-gradient (top functions by own time).

``--split`` times the library's part directly instead of by difference: each library's
hyper-gradient with the solver replaced by one that returns the converged ``T``-step solution
(forward glue, the optimality condition's graph, ``K`` CG iterations, the final product with
``B``, and the outer loss, which is the same user code in both), one Hessian-vector product of
each library (ours: autograd's double backward through the retained residual graph; TorchOpt's:
the ``functorch.vjp`` of its ``torch.func.grad`` optimality), and the bound this puts on the
full ratio with the inner solver shared: ``(S + B_TorchOpt) / (S + B_diffopt)`` is at most
``(S + B_TorchOpt) / S``, reached only by a free backward. ``--clock cpu`` times thread CPU
time, which a loaded machine inflates less than wall time.

``--matvec`` compares ways of computing one product of the Hessian system at the converged
``T``-step solution, on this problem and on a larger MLP (32-512-1, 4096 points): the
reverse-over-reverse VJP through the retained residual graph that ``custom_root`` uses (valid for
any Jacobian), forward-over-reverse JVPs (valid for a symmetric one: dual tensors through the
autograd-based optimality condition, ``torch.func.jvp`` of the ``torch.func.grad`` one, and
``torch.func.linearize``'s traced JVP, whose tracing is timed apart), a hand-derived
Hessian-vector product of this MLP (the arithmetic floor), the minor page faults per product,
and what ``solve_cg`` adds per iteration to ``K`` bare products.

    python benchmarks/implicit/profile_implicit.py [--rounds 9] [--steps 25 50 100 200]
    python benchmarks/implicit/profile_implicit.py --split [--clock cpu] [--solve normal_cg]
    python benchmarks/implicit/profile_implicit.py --matvec [--clock cpu] [--steps 25 200]
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import os
import pstats
import resource
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch
from torch.autograd import forward_ad

from diffopt.linear_solve._utils import vjp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_implicit as workloads

# K per T: the smallest of bench_implicit.CG_GRID as accurate as unrolling (its last run).
K_AT_SAME_ACCURACY = {25: 12, 50: 16, 100: 24, 200: 64}
# The same for normal CG (test_implicit_normal_cg); at T = 100, 200 no K reaches unrolling's error.
K_NORMAL_CG = {25: 32, 50: 48}


def inner_solver(problem: dict, steps: int):
    theta = tuple(t.detach() for t in problem["theta"])
    return workloads.gradient_descent(theta, theta, problem["data"], steps)


def contenders(problem: dict, steps: int, k: int) -> dict:
    fns = {"inner solver": lambda: inner_solver(problem, steps),
           "diffopt": lambda: workloads.implicit_hypergradient(problem, steps, k)}
    if workloads.torchopt is not None:
        fns["TorchOpt"] = lambda: workloads.torchopt_hypergradient(problem, steps, k)
    return fns


def backward_only(library: str, problem: dict, solution, k: int, solve: str = "cg"):
    """One hyper-gradient through ``library``'s custom_root whose solver returns ``solution``,
    with ``K`` iterations of its ``solve_<solve>`` (``cg`` or ``normal_cg``)."""
    theta, data = problem["theta"], problem["data"]
    if library == "diffopt":
        solver = getattr(workloads.linear_solve, f"solve_{solve}")(maxiter=k, rtol=0.0)
        decorator = workloads.custom_root(workloads.optimality, argnums=1, solve=solver)
        args = (theta, data)
    else:
        solver = getattr(workloads.torchopt.linear_solve, f"solve_{solve}")(maxiter=k, rtol=0.0)
        decorator = workloads.torchopt.diff.implicit.custom_root(
            workloads.functional_optimality, argnums=1, solve=solver)
        args = (tuple(theta), data)

    @decorator
    def solver(phi0, theta, data):
        return tuple(s.clone() for s in solution)

    phi = solver(tuple(t.detach() for t in theta), *args)
    return torch.autograd.grad(workloads.outer_loss(phi, problem["val"]), theta)


def hessian_vector_products(problem: dict, solution) -> dict:
    """One product ``v -> (dF/dphi)^T v`` at ``solution``, as each library computes it."""
    theta, data = problem["theta"], problem["data"]
    phi = tuple(s.detach().requires_grad_() for s in solution)
    v = tuple(torch.randn_like(s) for s in solution)
    residual = workloads.optimality(phi, theta, data)
    fns = {"diffopt HVP": lambda: torch.autograd.grad(residual, phi, v, retain_graph=True)}
    # Forward-over-reverse (torch.func.jvp of torch.func.grad): re-runs the objective's forward
    # and backward with tangents on every product instead of reusing a retained graph.
    detached_theta = tuple(t.detach() for t in theta)
    fns["forward-over-reverse HVP"] = lambda: torch.func.jvp(
        lambda s: workloads.functional_optimality(s, detached_theta, data),
        (tuple(s.detach() for s in solution),), (v,))
    if workloads.torchopt is not None:
        from functorch import vjp  # as TorchOpt 0.7.3 calls it

        _, vjp_fn = vjp(lambda s: workloads.functional_optimality(s, detached_theta, data),
                        tuple(s.detach() for s in solution))
        fns["TorchOpt HVP"] = lambda: vjp_fn(v)
    return fns


def split(args, problem: dict, clock) -> None:
    print("\n| T | K | inner solver S ms | diffopt backward ms | TorchOpt backward ms | "
          "diffopt HVP ms | TorchOpt HVP ms | forward-over-reverse HVP ms | "
          "full ratio (S + B_TorchOpt) / (S + B_diffopt) | "
          "bound with a free backward (S + B_TorchOpt) / S | B_diffopt for 1.3x ms | "
          "minor page faults per backward, diffopt / TorchOpt | load |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for steps in args.steps:
        k = (K_AT_SAME_ACCURACY if args.solve == "cg" else K_NORMAL_CG).get(steps)
        if k is None:
            print(f"| {steps} | no K as accurate as unrolling with {args.solve} |")
            continue
        solution = inner_solver(problem, steps)
        fns = {"S": functools.partial(inner_solver, problem, steps),
               "diffopt": functools.partial(backward_only, "diffopt", problem, solution, k,
                                            args.solve)}
        if workloads.torchopt is not None:
            fns["TorchOpt"] = functools.partial(backward_only, "torchopt", problem, solution, k,
                                                args.solve)
        hvps = hessian_vector_products(problem, solution)
        fns.update(hvps)
        for fn in fns.values():
            fn()
        times: dict[str, list[float]] = {name: [] for name in fns}
        for _ in range(args.rounds):
            for name, fn in fns.items():
                repeats = 10 if name in hvps else 1
                start = clock()
                for _ in range(repeats):
                    fn()
                times[name].append((clock() - start) / repeats)
        med = {name: statistics.median(v) * 1e3 for name, v in times.items()}
        s, ours, peer = med["S"], med["diffopt"], med.get("TorchOpt", float("nan"))
        print(f"| {steps} | {k} | {s:.1f} | {ours:.1f} | {peer:.1f} | {med['diffopt HVP']:.3f} | "
              f"{med.get('TorchOpt HVP', float('nan')):.3f} | "
              f"{med['forward-over-reverse HVP']:.3f} | {(s + peer) / (s + ours):.2f} | "
              f"{(s + peer) / s:.2f} | {(s + peer) / 1.3 - s:.1f} | "
              f"{minor_faults(fns['diffopt'], 5):.0f} / "
              f"{minor_faults(fns['TorchOpt'], 5) if 'TorchOpt' in fns else float('nan'):.0f} | "
              f"{os.getloadavg()[0]:.1f} |",
              flush=True)


def mlp_hessian_vector_product(problem: dict, solution):
    """The inner objective's Hessian times ``v`` for bench_implicit's MLP, derived by hand: the
    tangent of the forward pass, then of its gradient (two large matmuls and the elementwise
    terms, nothing recorded)."""
    (X, y), n = problem["data"], problem["data"][0].shape[0]
    W1, b1, W2, b2 = solution
    H = torch.tanh(torch.addmm(b1, X, W1.T))
    slope = 1 - H * H
    g = 2 * ((H @ W2.T + b2).squeeze(-1) - y) / n

    def product(v):
        V1, c1, V2, c2 = v
        H_dot = slope * torch.addmm(c1, X, V1.T)
        g_dot = 2 * (H_dot @ W2.T + H @ V2.T + c2).squeeze(-1) / n
        Z_bar_dot = (torch.outer(g_dot, W2[0]) + torch.outer(g, V2[0])) * slope \
            - 2 * torch.outer(g, W2[0]) * H * H_dot
        return (Z_bar_dot.T @ X + workloads.LAM * V1, Z_bar_dot.sum(0) + workloads.LAM * c1,
                (g_dot @ H + g @ H_dot).unsqueeze(0) + workloads.LAM * V2,
                g_dot.sum().reshape(1) + workloads.LAM * c2)

    return product


def matvec_products(problem: dict, solution) -> tuple[dict, float]:
    """Each way of computing one product at ``solution``, and the tracing time (ms) of
    ``torch.func.linearize``. All agree with the first to float32 rounding (checked)."""
    theta = tuple(t.detach() for t in problem["theta"])
    data = problem["data"]
    phi = [s.detach().requires_grad_() for s in solution]
    residual = list(workloads.optimality(tuple(phi), theta, data))
    v = [torch.randn_like(s) for s in solution]

    def reverse_over_reverse(u=v):
        with torch.no_grad():  # as in custom_root's backward
            return vjp(residual, phi, list(u), retain_graph=True)

    def dual_tensors():  # forward-over-reverse through the user's autograd.grad optimality
        with forward_ad.dual_level():
            duals = tuple(forward_ad.make_dual(s.detach().requires_grad_(), t)
                          for s, t in zip(solution, v))
            return [forward_ad.unpack_dual(r).tangent
                    for r in workloads.optimality(duals, theta, data)]

    def functional(s):
        return workloads.functional_optimality(s, theta, data)

    start = time.perf_counter()
    _, linearized = torch.func.linearize(functional, tuple(solution))
    trace_ms = (time.perf_counter() - start) * 1e3
    fns = {"reverse-over-reverse (retained graph)": reverse_over_reverse,
           "forward-over-reverse, dual tensors": dual_tensors,
           "forward-over-reverse, torch.func.jvp":
               lambda: torch.func.jvp(functional, (tuple(solution),), (tuple(v),))[1],
           "torch.func.linearize (per product)": lambda: linearized(tuple(v)),
           "hand-derived (arithmetic floor)": functools.partial(
               mlp_hessian_vector_product(problem, solution), v)}
    expected = reverse_over_reverse()
    for name, fn in fns.items():
        for got, want in zip(fn(), expected):
            if not torch.allclose(got, want, rtol=1e-4, atol=1e-6 * float(want.abs().max())):
                raise AssertionError(f"{name} disagrees with the reverse-over-reverse product")
    return fns, trace_ms


def minor_faults(fn, repeats: int = 50) -> float:
    fn()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(repeats):
        fn()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / repeats


def matvec(args, clock) -> None:
    print("\n| problem | T | product | ms per product | minor page faults per product | load |")
    print("|---|---:|---|---:|---:|---:|")
    sizes = {"MLP 32-256-1, 512 points": {},
             "MLP 32-512-1, 4096 points": {"n": 4096, "hidden": 512}}
    for label, size in sizes.items():
        problem = workloads.make_problem(**size)
        for steps in args.steps:
            fns, trace_ms = matvec_products(problem, inner_solver(problem, steps))
            times = interleaved(fns, args.rounds, clock, repeats=5)
            for name, fn in fns.items():
                print(f"| {label} | {steps} | {name} | {times[name]:.3f} | "
                      f"{minor_faults(fn):.0f} | {os.getloadavg()[0]:.1f} |", flush=True)
            print(f"| {label} | {steps} | torch.func.linearize's tracing (once per backward) | "
                  f"{trace_ms:.1f} | - | {os.getloadavg()[0]:.1f} |", flush=True)
    # What solve_cg adds to its K products: flattening, checks, the vector algebra, Python.
    print("\n| T | K | solve_cg with the product, ms | K bare products, ms | "
          "solver's own cost per iteration, us | load |")
    print("|---:|---:|---:|---:|---:|---:|")
    problem = workloads.make_problem()
    for steps in args.steps:
        k = K_AT_SAME_ACCURACY.get(steps, 16)
        times = interleaved(solver_and_bare_products(problem, steps, k), args.rounds, clock)
        print(f"| {steps} | {k} | {times['solve']:.2f} | {times['bare']:.2f} | "
              f"{(times['solve'] - times['bare']) / k * 1e3:.0f} | {os.getloadavg()[0]:.1f} |",
              flush=True)


def solver_and_bare_products(problem: dict, steps: int, k: int) -> dict:
    """``K`` iterations of ``solve_cg`` on the retained-graph product, and ``K`` products alone."""
    solution = inner_solver(problem, steps)
    product = matvec_products(problem, solution)[0]["reverse-over-reverse (retained graph)"]
    b = tuple(torch.randn_like(s) for s in solution)
    solve = workloads.linear_solve.solve_cg(maxiter=k, rtol=0.0)

    def solve_with_product():
        with torch.no_grad():
            return solve(lambda u: tuple(product(u)), b)

    def bare_products():
        for _ in range(k):
            product(b)

    return {"solve": solve_with_product, "bare": bare_products}


def interleaved(fns: dict, rounds: int, clock, repeats: int = 1) -> dict[str, float]:
    """Median ms per call of each function, timed in interleaved rounds after one warm-up."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            start = clock()
            for _ in range(repeats):
                fn()
            times[name].append((clock() - start) / repeats)
    return {name: statistics.median(v) * 1e3 for name, v in times.items()}


def top_functions(fn, repeats: int = 3, limit: int = 8) -> str:
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(repeats):
        fn()
    profile.disable()
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(limit)
    return "\n".join(line for line in out.getvalue().splitlines()
                     if line.strip() and not line.startswith(("   Ordered", "   List")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", default=list(K_AT_SAME_ACCURACY))
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--profile", action="store_true", help="cProfile each hyper-gradient")
    parser.add_argument("--split", action="store_true",
                        help="time each library's backward and HVP directly, and the bound")
    parser.add_argument("--matvec", action="store_true",
                        help="time the ways of computing one product of the Hessian system")
    parser.add_argument("--solve", choices=("cg", "normal_cg"), default="cg",
                        help="the linear solver of --split's backward (both libraries)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall time (perf_counter) or this thread's CPU time (thread_time)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    # TorchOpt 0.7.3 calls the deprecated functorch.vjp; its warning would cut the tables.
    warnings.filterwarnings("ignore", category=FutureWarning, message=".*functorch.vjp.*")
    problem = workloads.make_problem()
    clock = time.perf_counter if args.clock == "wall" else time.thread_time
    peer = "present" if workloads.torchopt is not None else "absent"
    print(f"torch {torch.__version__}, 1 thread, {args.rounds} interleaved rounds, medians of "
          f"{args.clock} time; TorchOpt {peer}")
    if args.split:
        split(args, problem, clock)
        return
    if args.matvec:
        matvec(args, clock)
        return
    print("\n| T | K | inner solver ms | diffopt ms | TorchOpt ms | diffopt backward ms | "
          "TorchOpt backward ms | TorchOpt / diffopt (full) | (backward) | load |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for steps in args.steps:
        k = K_AT_SAME_ACCURACY.get(steps, 16)
        fns = contenders(problem, steps, k)
        for fn in fns.values():  # warm-up
            fn()
        times: dict[str, list[float]] = {name: [] for name in fns}
        for _ in range(args.rounds):
            for name, fn in fns.items():
                start = clock()
                fn()
                times[name].append(clock() - start)
        med = {name: statistics.median(v) * 1e3 for name, v in times.items()}
        ours_bwd = med["diffopt"] - med["inner solver"]
        peer = med.get("TorchOpt", float("nan"))
        peer_bwd = peer - med["inner solver"]
        print(f"| {steps} | {k} | {med['inner solver']:.1f} | {med['diffopt']:.1f} | {peer:.1f} | "
              f"{ours_bwd:.1f} | {peer_bwd:.1f} | {peer / med['diffopt']:.2f} | "
              f"{peer_bwd / ours_bwd:.2f} | {os.getloadavg()[0]:.1f} |", flush=True)
        if args.profile:
            for name in ("diffopt", "TorchOpt"):
                if name in fns:
                    print(f"\ncProfile, {name}, T={steps}, K={k} (3 calls):\n"
                          + top_functions(fns[name]))


if __name__ == "__main__":
    main()
