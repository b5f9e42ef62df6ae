#!/usr/bin/env python3
"""MAML outer-step time and peak memory: diffopt (accelerated op on/off) vs TorchOpt vs higher.

Configurations (diffopt and TorchOpt alike): the plain ``MetaAdam``/``MetaSGD``, the same with
the accelerated op (``-accel``), and the functional API (``-func``: ``adam``/``sgd``,
``update(inplace=False)``, ``apply_updates(inplace=False)``, ``torch.func.functional_call``).

Problems: the MAML sinusoid MLP (1-40-40-1, K=10) and a 4-layer conv net (4 x [3x3 conv,
BatchNorm without running stats, ReLU, 2x2 max-pool], 5-way 5-shot on 28x28 inputs, 2 tasks
per outer step; the MLP takes 10 tasks of K=10 points), each with
1, 3 and 5 differentiable inner steps of SGD and of Adam, a meta-batch of tasks, and an outer Adam
step. One outer step = the inner loops + the meta-backward + the outer update.

Before timing, every library computes the meta-gradient of the same problem from the same
initialization and data, in float64; the script checks they agree with diffopt's (entries a peer returns as
NaN/inf are reported, not compared: TorchOpt's and higher's differentiable Adam give NaN wherever
a gradient entry is exactly zero).

Peak memory is measured in one fresh process per library (``--worker``) so it belongs to that
library alone: peak RSS growth over the resident size before the first of 3 outer steps, or
``torch.cuda.max_memory_allocated`` on CUDA. "graph MiB" is exact and deterministic: the
distinct storages one task's autograd graph saves for backward, which is what MAML's peak memory
scales with. Peers are imported lazily and skipped when not installed.

    python benchmarks/maml/bench_maml.py [--quick] [pytest options]

is ``pytest benchmarks/maml/test_maml.py`` (test_maml.py, the pytest-benchmark suite, times the
libraries' outer steps side by side; see benchmarks/RESULTS.md).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

LIBRARIES = ["diffopt", "diffopt-accel", "diffopt-func", "torchopt", "torchopt-accel",
             "torchopt-func", "higher"]
# Each diffopt configuration and the same configuration of TorchOpt, compared one to one.
PAIRS = [("diffopt", "torchopt"), ("diffopt-accel", "torchopt-accel"),
         ("diffopt-func", "torchopt-func")]
INNER_LR = {"sgd": 0.1, "adam": 0.01}


# --- problems ------------------------------------------------------------------------------------
def make_mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(1, 40), nn.ReLU(), nn.Linear(40, 40), nn.ReLU(),
                         nn.Linear(40, 1))


def make_conv(ways: int = 5, channels: int = 32) -> nn.Module:
    layers: list[nn.Module] = []
    in_channels = 1
    for _ in range(4):
        layers += [nn.Conv2d(in_channels, channels, 3, padding=1),
                   nn.BatchNorm2d(channels, track_running_stats=False), nn.ReLU(),
                   nn.MaxPool2d(2)]
        in_channels = channels
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(channels, ways))


def make_tasks(problem: str, meta_batch: int, seed: int, device: torch.device):
    generator = torch.Generator().manual_seed(seed)
    tasks = []
    for _ in range(meta_batch):
        if problem == "mlp":
            amplitude = 0.1 + 4.9 * torch.rand((), generator=generator)
            phase = 3.14159 * torch.rand((), generator=generator)
            xs = 10 * torch.rand(10, 1, generator=generator) - 5
            xq = 10 * torch.rand(10, 1, generator=generator) - 5
            task = (xs, amplitude * torch.sin(xs + phase), xq, amplitude * torch.sin(xq + phase))
        else:
            xs = torch.randn(25, 1, 28, 28, generator=generator)
            xq = torch.randn(25, 1, 28, 28, generator=generator)
            ys = torch.arange(5).repeat_interleave(5)
            task = (xs, ys, xq, ys.clone())
        tasks.append(tuple(t.to(device) for t in task))
    return tasks


def loss_fn(problem: str):
    return F.mse_loss if problem == "mlp" else F.cross_entropy


# --- one outer step per library ----------------------------------------------------------------
def make_outer_step(library: str, problem: str, inner: str, steps: int, net: nn.Module, tasks):
    """A function running one outer step (tasks' inner loops + meta-backward), grads accumulate."""
    loss = loss_fn(problem)
    lr = INNER_LR[inner]
    accelerated = library.endswith("-accel")
    if library.endswith("-func"):
        # The functional API as TorchOpt documents it: a tuple of parameters, update(inplace=False),
        # apply_updates(inplace=False), the module called with them by torch.func.functional_call.
        lib = __import__(library.split("-")[0])
        names = [name for name, _ in net.named_parameters()]

        def call(params, x):
            return torch.func.functional_call(net, dict(zip(names, params)), (x,))

        def outer_step():
            for xs, ys, xq, yq in tasks:
                params = tuple(net.parameters())
                inner_opt = lib.sgd(lr=lr) if inner == "sgd" else lib.adam(lr=lr)
                state = inner_opt.init(params)
                for _ in range(steps):
                    grads = torch.autograd.grad(loss(call(params, xs), ys), params,
                                                create_graph=True)
                    updates, state = inner_opt.update(grads, state, inplace=False)
                    params = lib.apply_updates(params, updates, inplace=False)
                loss(call(params, xq), yq).backward()

        return outer_step
    if library.startswith("diffopt") or library.startswith("torchopt"):
        lib = __import__("diffopt" if library.startswith("diffopt") else "torchopt")
        if inner == "sgd":
            def make_inner(module):
                return lib.MetaSGD(module, lr=lr)
        else:
            def make_inner(module):
                return lib.MetaAdam(module, lr=lr, use_accelerated_op=accelerated)
        saved = lib.extract_state_dict(net)

        def outer_step():
            for xs, ys, xq, yq in tasks:
                inner_opt = make_inner(net)
                for _ in range(steps):
                    inner_opt.step(loss(net(xs), ys))
                loss(net(xq), yq).backward()
                lib.recover_state_dict(net, saved)

        return outer_step
    if library == "higher":
        import higher

        optimizer_cls = torch.optim.SGD if inner == "sgd" else torch.optim.Adam
        inner_opt = optimizer_cls(net.parameters(), lr=lr)

        def outer_step():
            for xs, ys, xq, yq in tasks:
                with higher.innerloop_ctx(net, inner_opt, copy_initial_weights=False,
                                          track_higher_grads=True) as (fnet, diff_opt):
                    for _ in range(steps):
                        diff_opt.step(loss(fnet(xs), ys))
                    loss(fnet(xq), yq).backward()

        return outer_step
    raise ValueError(library)


def available(library: str) -> str | None:
    """None if the library can run here, else why not."""
    name = library.split("-")[0]
    try:
        lib = __import__(name)
    except ImportError:
        return f"{name} is not installed"
    if library == "diffopt-accel" and not lib.accelerated_op_available("cpu"):
        return "fused-optim is not installed"
    if library == "torchopt-accel" and not lib.accelerated_op_available("cpu"):
        return "TorchOpt's accelerated op is not available"
    return None


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reset_peak_rss() -> bool:
    """Reset the kernel's resident high-water mark (VmHWM) to the current RSS, where allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    """VmHWM from /proc/self/status (falls back to ru_maxrss)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def make_full_step(library, problem, inner, steps, device, *, restore=True):
    """A fresh model, its tasks and outer optimizer, and a function doing one full outer step.

    Every call starts from the same parameters (the outer update is made, then undone by a copy
    of 18 small tensors at most; ``restore=False`` keeps it, as training would, for
    ``profile_maml.py --no-restore``), so every round of every contender times the same computation.
    Without that, TorchOpt's plain and functional Adam time a broken network: their float32
    meta-gradient has NaN entries too (its square root's derivative at an exactly-zero gradient
    entry), the outer Adam step spreads them to every parameter within a few outer steps (the
    conv net is all NaN after the 4th outer step with 1 inner step, the 6th with 3), and on NaN
    activations torch's ``max_pool2d`` runs 2.5 times faster than on real ones.
    """
    torch.manual_seed(0)
    net = (make_mlp() if problem == "mlp" else make_conv()).to(device)
    tasks = make_tasks(problem, 2 if problem == "conv" else 10, seed=1, device=device)
    meta_opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    outer_step = make_outer_step(library, problem, inner, steps, net, tasks)
    params = list(net.parameters())
    initial = [p.detach().clone() for p in params]

    def full_step():
        meta_opt.zero_grad()
        outer_step()
        meta_opt.step()
        if restore:
            with torch.no_grad():
                torch._foreach_copy_(params, initial)

    full_step.parameters = params  # type: ignore[attr-defined]
    return full_step


def peak_memory(library, problem, inner, steps, device) -> dict:
    """Run in a fresh process: peak memory growth over 3 outer steps of one library."""
    full_step = make_full_step(library, problem, inner, steps, device)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        # Imports can leave a transient high-water mark above the current RSS; start afresh.
        reset_peak_rss()
        base = rss_bytes()
    for _ in range(3):
        full_step()
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = peak_rss_bytes() - base
    return {"peak_mib": peak / 2**20}


def meta_gradient(library, problem, inner, steps, device) -> list[torch.Tensor]:
    """The meta-gradient of a 2-task outer step, in float64.

    Float64 keeps the comparison about the libraries, not about float32 rounding: with Adam, a
    parameter whose gradient is rounding noise (a conv bias followed by BatchNorm) gets an update
    ``g / (|g| + eps)`` whose meta-gradient amplifies that noise by ``1/eps``.
    """
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        torch.manual_seed(0)
        net = (make_mlp() if problem == "mlp" else make_conv()).to(device)
        tasks = make_tasks(problem, 2, seed=1, device=device)
        make_outer_step(library, problem, inner, steps, net, tasks)()
        return [p.grad.detach().clone() for p in net.parameters()]
    finally:
        torch.set_default_dtype(default)


def graph_mib(library, problem, inner, steps, device) -> float:
    """MiB of distinct storages the autograd graph of one task saves for backward (its peak)."""
    torch.manual_seed(0)
    net = (make_mlp() if problem == "mlp" else make_conv()).to(device)
    tasks = make_tasks(problem, 1, seed=1, device=device)
    outer_step = make_outer_step(library, problem, inner, steps, net, tasks)
    seen: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        outer_step()
    return sum(seen.values()) / 2**20


def finite_difference_check(libraries, problem, device) -> dict[str, float]:
    """Float64 spot check of the Adam meta-gradients against central differences.

    With 1 inner Adam step, for each parameter tensor, the entry where the libraries disagree
    most is differentiated numerically; returns (and prints) each library's largest error there.
    """
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        grads = {}
        for library in libraries:
            torch.manual_seed(0)
            net = (make_mlp() if problem == "mlp" else make_conv()).to(device)
            tasks = make_tasks(problem, 2, seed=1, device=device)
            make_outer_step(library, problem, "adam", 1, net, tasks)()
            grads[library] = [p.grad.detach().clone() for p in net.parameters()]
        torch.manual_seed(0)
        net = (make_mlp() if problem == "mlp" else make_conv()).to(device)
        tasks = make_tasks(problem, 2, seed=1, device=device)
        loss = loss_fn(problem)
        import diffopt

        saved = diffopt.extract_state_dict(net)

        def outer_value() -> float:
            total = 0.0
            for xs, ys, xq, yq in tasks:
                diffopt.MetaAdam(net, lr=INNER_LR["adam"]).step(loss(net(xs), ys))
                total += loss(net(xq), yq).item()
                diffopt.recover_state_dict(net, saved)
            return total

        worst = dict.fromkeys(libraries, 0.0)
        scale = max(g.abs().max().item() for g in grads[libraries[0]])
        for i, param in enumerate(net.parameters()):
            spread = torch.stack([torch.nan_to_num(grads[lib][i], nan=1e30).reshape(-1)
                                  for lib in libraries]).std(0)
            j = int(spread.argmax())
            flat, h = param.data.view(-1), 1e-6
            original = flat[j].item()
            flat[j] = original + h
            plus = outer_value()
            flat[j] = original - h
            minus = outer_value()
            flat[j] = original
            numeric = (plus - minus) / (2 * h)
            for lib in libraries:
                # Relative to the largest entry of the whole meta-gradient: some entries are
                # exactly zero (a conv bias before BatchNorm cannot change the outer loss), where
                # the numeric derivative is pure rounding noise.
                err = abs(grads[lib][i].reshape(-1)[j].item() - numeric) / scale
                worst[lib] = max(worst[lib], err if err == err else float("inf"))
        for lib, err in worst.items():
            print(f"  float64 finite-difference check, {problem} / 1 Adam step: {lib}: "
                  f"max err {err:.1e} (relative to the largest entry)")
        return worst
    finally:
        torch.set_default_dtype(default)


def compare(reference, other) -> tuple[float, int]:
    """Largest error over finite entries relative to the largest meta-gradient entry, and the
    count of non-finite entries.

    The scale is global, not per tensor: a conv bias followed by BatchNorm has a meta-gradient
    that is exactly zero in exact arithmetic, so per-tensor relative errors would compare
    rounding noise with rounding noise.
    """
    scale = max(r.abs().max().item() for r in reference) or 1.0
    worst, bad = 0.0, 0
    for r, o in zip(reference, other):
        finite = torch.isfinite(o)
        bad += int((~finite).sum())
        if finite.any():
            worst = max(worst, (r[finite] - o[finite]).abs().max().item() / scale)
    return worst, bad


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # a child: LIB:PROBLEM:INNER:STEPS
    args, rest = parser.parse_known_args(argv)
    torch.set_num_threads(args.threads or 1)
    if args.worker:  # child process: one measurement, printed as JSON
        library, problem, inner, steps = args.worker.split(":")
        print(json.dumps(peak_memory(library, problem, inner, int(steps), torch.device(args.device))))
        return 0
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import _suite

    threads = ["--threads", str(args.threads)] if args.threads else []
    # (--device is the suite's option too: it was parsed here for the workers, so pass it on)
    return _suite.run_suite(Path(__file__).with_name("test_maml.py"), [*threads, "--device", args.device, *rest])


if __name__ == "__main__":
    sys.exit(main())
