#!/usr/bin/env python3
"""The doctests and numerical tests again under each CPU build that can run them (nox -s isa_matrix).

    python ci/isa_matrix.py [--list] [--jobs=N] [--with-native] [PYTEST ARGS...]

Two switches pick the code that does the arithmetic on an x86 CPU, each read once per process:
fused-optim's CPU loops (``FUSED_OPTIM_CPU_ISA=baseline|avx2|avx512``, csrc/multi_tensor.h) and
torch's own vector kernels (``ATEN_CPU_CAPABILITY=default|avx2|avx512``, read when torch is
imported). An example or a test whose outcome depends on the last bit of a computation (a
division, an FMA, a vectorized loop's scalar tail) passes on the machine it was written on and
fails on the next; run under every build this CPU has, it fails here instead. Each combination
runs in fresh pytest processes (the variables must be set before torch is imported); one this CPU
cannot run is skipped with the reason, never run under a silently narrower build.

What runs where (RUNS): every doctest of the three packages under all nine combinations (cheap:
one process for all three packages, and a printed float is the most fragile thing we have), and
the numerical suites of fused-optim and diffopt (values against torch.optim, closed forms and the
references, without the compile and opcheck tests, which check graphs rather than arithmetic)
under five: the diagonal, which gives each value of each switch once, and the two far corners
(our widest loops against torch's scalar kernels, and the reverse), where a test comparing our
result with torch's bit for bit is most likely to see them differ. The four other combinations
would repeat what those show, and would cost CI about two more minutes. The combination the
packages' suites ran under (this machine's own builds, or what the two variables ask for) is left
out (``--with-native`` keeps it): ci/test.sh runs the packages' whole suites under it just before
(on CI's AVX2 box, avx2 with torch's AVX2 kernels: a minute and a half of repeated processes).

The pytest processes run ``--jobs`` at a time (default: one per core, at most four; the suites
are single-threaded for the most part), each one's output shown when it ends.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
FUSED_ISAS = ("baseline", "avx2", "avx512")  # FUSED_OPTIM_CPU_ISA, narrowest first
ATEN_CAPABILITIES = ("default", "avx2", "avx512")  # ATEN_CPU_CAPABILITY, narrowest first
# The x86 feature each fused-optim build needs (SelectedCpuIsa in csrc/multi_tensor.cpp).
FUSED_ISA_FLAG = {"baseline": None, "avx2": "avx2", "avx512": "avx512f"}
# The x86 features torch's kernels of each capability use. torch takes ATEN_CPU_CAPABILITY at its
# word, without asking the CPU (asked for avx512 on an AVX2-only CPU it reports AVX512, then dies of
# SIGILL in its first vector kernel), so the CPU's flags decide here.
ATEN_CAPABILITY_FLAGS = {"default": (), "avx2": ("avx2", "fma"),
                         "avx512": ("avx512f", "avx512bw", "avx512vl", "avx512dq")}


class Suite(NamedTuple):
    """Test paths (relative to the root) and pytest options that run in one process."""

    name: str
    args: tuple[str, ...]


# The three packages' test_doctests.py share a name: importlib mode lets one process collect them.
DOCTESTS = Suite("doctests", ("--import-mode=importlib", *(
    f"packages/{p}/tests/test_doctests.py" for p in ("optree-core", "fused-optim", "diffopt"))))
# The tests whose outcome comes out of the arithmetic; errors, packaging, dispatch and graphs do
# not change with the ISA. Each package in its own process: both test folders have a helpers.py.
FUSED_NUMERICS = Suite("fused-optim numerics", (
    *(f"packages/fused-optim/tests/{name}" for name in (
        "test_functional.py", "test_optim.py", "test_research_optim.py", "test_adafactor.py",
        "test_ops.py", "test_eager_runner.py", "test_eager_call.py", "test_functorch.py")),
    "-k", "not compile and not opcheck"))
DIFFOPT_NUMERICS = Suite("diffopt numerics", (
    *(f"packages/diffopt/tests/{name}" for name in (
        "test_alias.py", "accelerated_op", "transform", "optim", "test_tree_math.py", "linalg",
        "linear_solve", "test_update.py", "test_combine.py")),
    "-k", "not compile"))
# The combinations that run the numerical suites besides the doctests (see the module docstring).
NUMERICS_AT = {*zip(FUSED_ISAS, ATEN_CAPABILITIES), ("avx512", "default"), ("baseline", "avx512")}


class Run(NamedTuple):
    fused_isa: str
    aten: str
    suites: tuple[Suite, ...]

    def __str__(self) -> str:
        return f"FUSED_OPTIM_CPU_ISA={self.fused_isa} ATEN_CPU_CAPABILITY={self.aten}"


RUNS = [Run(isa, aten, (DOCTESTS, FUSED_NUMERICS, DIFFOPT_NUMERICS) if (isa, aten) in NUMERICS_AT
            else (DOCTESTS,))
        for isa, aten in itertools.product(FUSED_ISAS, ATEN_CAPABILITIES)]


def cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux lists them (none elsewhere: only the baselines then)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return next((set(line.split(":", 1)[1].split()) for line in text.splitlines()
                 if line.startswith("flags")), set())


def aten_capability(python: str, wanted: str | None) -> str:
    """What torch runs when asked for ``wanted`` (None: under this process's own environment, as
    the packages' suites ran): it falls back to what the CPU has, silently."""
    env = dict(os.environ) if wanted is None else dict(os.environ, ATEN_CPU_CAPABILITY=wanted)
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    return subprocess.run([python, "-c", code], env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


def native_run(flags: set[str], aten_native: str, fused_limit: str | None = None) -> tuple[str, str]:
    """The combination the packages' suites ran under: fused-optim's widest build this CPU has
    (csrc/modes.cpp: its AVX2 build also needs F16C), capped by ``fused_limit`` (their
    FUSED_OPTIM_CPU_ISA, if set), and what torch ran (``aten_native``)."""
    isa = "avx512" if "avx512f" in flags else "avx2" if {"avx2", "f16c"} <= flags else "baseline"
    if fused_limit in FUSED_ISAS and FUSED_ISAS.index(fused_limit) < FUSED_ISAS.index(isa):
        isa = fused_limit
    return isa, aten_native.lower()


def why_not(run: Run, flags: set[str], aten_runs: dict[str, str], native: tuple[str, str] | None = None) -> str | None:
    """Why ``run`` is not run here (``aten_runs``: what torch runs for each capability asked), or
    None. ``native``: the combination the packages' own suites ran under (``native_run``), which
    would only repeat them; otherwise a CPU that cannot run it as asked."""
    if (run.fused_isa, run.aten) == native:
        return "this machine's own builds, under which the packages' suites ran these tests"
    flag = FUSED_ISA_FLAG[run.fused_isa]
    if flag is not None and flag not in flags:
        return f"the CPU has no {flag}, fused-optim would run a narrower build than {run.fused_isa}"
    missing = [f for f in ATEN_CAPABILITY_FLAGS[run.aten] if f not in flags]
    if missing:
        return f"the CPU has no {', '.join(missing)}, which torch's {run.aten} kernels use"
    if aten_runs[run.aten].lower() != run.aten:
        return f"torch runs {aten_runs[run.aten]} here when asked for {run.aten}"
    return None


def run_suite(python: str, run: Run, suite: Suite, pytest_args: list[str]) -> tuple[int, str, float]:
    """One suite under one combination in a fresh process: (exit code, its output, seconds)."""
    env = dict(os.environ, FUSED_OPTIM_CPU_ISA=run.fused_isa, ATEN_CPU_CAPABILITY=run.aten)
    start = time.perf_counter()
    proc = subprocess.run([python, "-m", "pytest", *suite.args, "-q", "-p", "no:cacheprovider", *pytest_args],
                          cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return proc.returncode, proc.stdout, time.perf_counter() - start


def main(argv: list[str]) -> int:
    if argv[:1] == ["--list"]:
        for run in RUNS:
            print(f"{run}: {', '.join(suite.name for suite in run.suites)}")
        return 0
    jobs = min(os.cpu_count() or 1, 4)
    pytest_args = []
    skip_native = True
    for arg in argv:
        if arg.startswith("--jobs="):
            jobs = int(arg.removeprefix("--jobs="))
        elif arg == "--with-native":
            skip_native = False
        else:
            pytest_args.append(arg)
    python = sys.executable
    flags = cpu_flags()
    aten_runs = {cap: aten_capability(python, cap) for cap in ATEN_CAPABILITIES}
    native = (native_run(flags, aten_capability(python, None), os.environ.get("FUSED_OPTIM_CPU_ISA"))
              if skip_native else None)
    summary, todo = [], []
    for run in RUNS:
        reason = why_not(run, flags, aten_runs, native)
        if reason is None:
            todo += [(run, suite) for suite in run.suites]
        else:
            summary.append(f"{run}: skipped: {reason}")
            print(f"isa_matrix: {summary[-1]}", flush=True)
    failed = False
    with ThreadPoolExecutor(max(jobs, 1)) as pool:
        results = pool.map(lambda task: run_suite(python, *task, pytest_args), todo)
        for (run, suite), (code, output, seconds) in zip(todo, results):
            failed |= code != 0
            outcome = "passed" if code == 0 else f"FAILED (pytest exit code {code})"
            summary.append(f"{run}: {suite.name} {outcome} in {seconds:.0f} s")
            print(f"isa_matrix: {summary[-1]}", output, sep="\n", flush=True)
    print("isa_matrix:", *summary, sep="\n  ")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
