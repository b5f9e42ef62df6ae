"""step() time of two or more builds of fused-optim side by side: did a change of the build slow it?

Each build is a directory put first on ``sys.path`` (a ``src`` tree holding a compiled
``fused_optim``), optionally with environment settings. Every round runs each build once, in a
fresh process and in rotating order, timing ``optimizer.step()`` (median of its samples) per
workload; the table gives each build's median over the rounds and its ratio to the first build.

    python benchmarks/optim/compare_builds.py --build old=/path/a --build new=/path/b \\
        --build "new, torch.ops=/path/b:FUSED_OPTIM_EAGER=0" --rounds 6

``FUSED_OPTIM_EAGER=0`` turns fused-optim's fast path off (what runs under a torch other than the
one the build was compiled against); ``FUSED_OPTIM_EMULATE_CUDA=plan`` times the CUDA path's host
work without a GPU (launches planned, no block run). ``--workloads`` picks some of WORKLOADS.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

WORKLOADS = {  # name: (optimizer, options, shapes, dtype)
    "Adam 200x1k": ("Adam", dict(lr=1e-3), [(1000,)] * 200, "float32"),
    "AdamW 200x1k": ("AdamW", dict(lr=1e-3), [(1000,)] * 200, "float32"),
    "SGD-m 200x1k": ("SGD", dict(lr=1e-3, momentum=0.9), [(1000,)] * 200, "float32"),
    "NAdam 200x1k": ("NAdam", dict(lr=1e-3), [(1000,)] * 200, "float32"),
    "Adam 4x4M": ("Adam", dict(lr=1e-3), [(4_000_000,)] * 4, "float32"),
    "SGD-m 4x4M": ("SGD", dict(lr=1e-3, momentum=0.9), [(4_000_000,)] * 4, "float32"),
    "Adam 4x4M bf16": ("Adam", dict(lr=1e-3), [(4_000_000,)] * 4, "bfloat16"),
    "Adafactor 200x1k": ("Adafactor", dict(lr=1e-2), [(1000,)] * 200, "float32"),
    "Adafactor 200x32x32": ("Adafactor", dict(lr=1e-2), [(32, 32)] * 200, "float32"),
}

CHILD = r"""
import json, sys, time, statistics
import torch, fused_optim
workloads = json.loads(sys.argv[1])
if int(sys.argv[2]):
    torch.set_num_threads(int(sys.argv[2]))
out = {}
for name, (cls, options, shapes, dtype) in workloads.items():
    g = torch.Generator().manual_seed(0)
    params = [torch.randn(s, generator=g).to(getattr(torch, dtype)).requires_grad_() for s in shapes]
    for p in params:
        p.grad = torch.randn(p.shape, generator=g).to(p.dtype)
    opt = getattr(fused_optim, cls)(params, **options)
    big = sum(p.numel() for p in params) > 1_000_000
    reps, samples = (2, 15) if big else (50, 25)
    for _ in range(3):
        opt.step()
    times = []
    for _ in range(samples):
        t = time.perf_counter()
        for _ in range(reps):
            opt.step()
        times.append((time.perf_counter() - t) / reps)
    out[name] = statistics.median(times)
out["_eager"] = fused_optim.BUILD_INFO.get("eager", True)
print(json.dumps(out))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", action="append", required=True, metavar="NAME=PATH[:VAR=VALUE...]")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads in each process (0: torch's)")
    parser.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    args = parser.parse_args()
    workloads = {w: WORKLOADS[w] for w in args.workloads}
    builds = []
    for spec in args.build:
        name, _, rest = spec.partition("=")
        path, *settings = rest.split(":")
        builds.append((name, path, dict(s.split("=", 1) for s in settings)))
    times: dict[str, dict[str, list[float]]] = {b[0]: {w: [] for w in workloads} for b in builds}
    for r in range(args.rounds):
        order = builds[r % len(builds):] + builds[:r % len(builds)]
        for name, path, settings in order:
            env = dict(os.environ, PYTHONPATH=path, **settings)
            result = subprocess.run([sys.executable, "-c", CHILD, json.dumps(workloads), str(args.threads)], env=env,
                                    capture_output=True,
                                    text=True, check=True)
            got = json.loads(result.stdout.strip().splitlines()[-1])
            for w in workloads:
                times[name][w].append(got[w])
        print(f"round {r + 1}/{args.rounds} done, load {os.getloadavg()[0]:.2f}", file=sys.stderr)
    first = builds[0][0]
    print("| workload | " + " | ".join(f"{b[0]} (us)" for b in builds) + " | "
          + " | ".join(f"{first} / {b[0]}" for b in builds[1:]) + " |")
    print("|---" * (2 * len(builds)) + "|")
    for w in workloads:
        med = {b[0]: statistics.median(times[b[0]][w]) for b in builds}
        print(f"| {w} | " + " | ".join(f"{med[b[0]] * 1e6:.0f}" for b in builds) + " | "
              + " | ".join(f"{med[first] / med[b[0]]:.3f}" for b in builds[1:]) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
