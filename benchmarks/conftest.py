"""pytest configuration of the benchmark suite: its options, the ``race`` fixture that times a
workload's contenders interleaved (benchmarks/_suite.py), and the closing ratio tables.

    pytest benchmarks/pytree                       # one area (nox -s benchmarks runs them all)
    pytest benchmarks --quick                      # the CI smoke run: tiny workloads, 1 round
    pytest benchmarks/maml --rounds 20 --bench-report /tmp/maml.md
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _suite


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("diffopt benchmarks")
    group.addoption("--quick", action="store_true",
                    help="tiny workloads and one round: a smoke run (also BENCH_QUICK=1)")
    group.addoption("--rounds", type=int, default=None,
                    help="interleaved rounds per workload (default: each module's own)")
    group.addoption("--threads", type=int, default=None,
                    help="torch intra-op threads (default: each module's own)")
    group.addoption("--device", default="cpu",
                    help="where the tensors of the optim and maml benchmarks live (cpu or cuda)")
    group.addoption("--compiled", action="store_true",
                    help="also time the torch.compile (inductor) contenders: minutes of compiling")
    group.addoption("--no-memory", action="store_true",
                    help="time only: skip the memory figures (maml's graph and RSS, implicit's RSS)")
    group.addoption("--compare-ratios", type=Path, default=None, metavar="JSON",
                    help="print every peer/ours ratio against the same ratio in a recorded "
                         "--benchmark-json file (e.g. benchmarks/results/maml.json)")
    group.addoption("--bench-report", type=Path, default=None,
                    help="also write the closing markdown tables to this file")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--quick", default=False):
        _suite.QUICK = True
    _suite.ROUNDS = config.getoption("--rounds", default=None)
    json_path = config.getoption("benchmark_json", default=None)
    # pytest-benchmark writes it at the very end, without making its folder; some of its releases
    # hand over the file already opened (argparse.FileType), whose folder then exists.
    if isinstance(json_path, (str, os.PathLike)):
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
    config.stash[_STATE] = _State()


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A bare ``pytest`` from the repository root runs the packages' tests, not these
    benchmarks (minutes): they are collected only when a path inside benchmarks/ is named."""
    here = Path(__file__).resolve().parent
    for arg in config.args:
        named = Path(arg.split("::")[0]).resolve()
        if named == here or here in named.parents:
            return None
    return True if here in collection_path.resolve().parents else None


class _State:
    def __init__(self) -> None:
        self.selected: dict[tuple, list[str]] = {}  # workload key -> its contenders in this run
        self.workloads: dict[tuple, _suite.Workload] = {}
        # (test file, test function) -> its report and workloads, in the order they ran
        self.reports: dict[tuple, tuple[_suite.Report, list[_suite.Workload]]] = {}


_STATE = pytest.StashKey[_State]()


def _workload_key(item: pytest.Item) -> tuple | None:
    params = getattr(getattr(item, "callspec", None), "params", None)
    if not params or "contender" not in params:
        return None
    rest = tuple(sorted((k, repr(v)) for k, v in params.items() if k != "contender"))
    return (item.path, getattr(item, "originalname", item.name), rest)


def pytest_collection_finish(session: pytest.Session) -> None:
    state = session.config.stash[_STATE]
    for item in session.items:
        key = _workload_key(item)
        if key is not None:
            state.selected.setdefault(key, []).append(item.callspec.params["contender"])


@pytest.fixture(scope="module", autouse=True)
def _threads(request: pytest.FixtureRequest):
    """Each module's torch thread count (``REPORT.threads``), or ``--threads``."""
    report = getattr(request.module, "REPORT", None)
    if isinstance(report, dict):
        report = next(iter(report.values()))
    wanted = request.config.getoption("--threads") or getattr(report, "threads", None)
    if not wanted or "torch" not in sys.modules:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(wanted)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def race(benchmark: Any, request: pytest.FixtureRequest):
    """``race(build, rounds=..., **timing)``: time this test's workload (every contender selected
    in this run, interleaved, once per workload) and record this test's contender."""
    state = request.config.stash[_STATE]
    item = request.node
    key = _workload_key(item)
    if key is None:
        raise pytest.UsageError(f"{item.nodeid}: a race test needs a 'contender' parameter")
    module = request.module
    # REPORT, or {test function name: REPORT} when a module's tests have different contenders.
    report: _suite.Report = module.REPORT
    if isinstance(report, dict):
        report = report[key[1]]

    def run(build, *, rounds: int, warmup: int = 1, **timing: Any) -> _suite.Outcome:
        params = {k: v for k, v in item.callspec.params.items() if k != "contender"}
        contender = item.callspec.params["contender"]
        workload = state.workloads.get(key)
        if workload is None:
            plan = _suite.Timing(rounds=_suite.ROUNDS or (1 if _suite.QUICK else rounds),
                                 warmup=0 if _suite.QUICK else warmup, **timing)
            workload = _suite.race_workload(params, state.selected[key], build, plan,
                                            report.ours)
            state.workloads[key] = workload
            state.reports.setdefault(key[:2], (report, []))[1].append(workload)
        outcome = workload.outcomes[contender]
        label = " ".join(str(v) for v in params.values())
        benchmark.group = f"{report.title}: {label}"
        benchmark.extra_info.update(contender=contender, workload=label,
                                    ours=contender in report.ours,
                                    load_avg=list(workload.load), loops=outcome.loops,
                                    **{k: v for k, v in workload.info.items()
                                       if isinstance(v, str | int | float | bool)})
        if outcome.error is not None and outcome.skipped is None:
            raise outcome.error
        if outcome.skipped is not None:
            benchmark.skipped = True
            pytest.skip(f"{contender}: {outcome.skipped}")
        _suite.feed(benchmark, outcome)
        return outcome

    return run


def _dist_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "?"


def _header(config: pytest.Config) -> str:
    versions = []
    for name in ("optree_core", "fused_optim", "diffopt", "torch", "optree", "jax", "torchopt",
                 "higher"):
        module = sys.modules.get(name)
        if module is not None:
            versions.append(f"{name} {getattr(module, '__version__', None) or _dist_version(name)}")
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    mode = "quick (smoke) mode: one cold round, not a measurement; " if _suite.QUICK else ""
    root = f"{config.rootpath}{os.sep}"
    args = shlex.join(arg.replace(root, "") for arg in config.invocation_params.args)
    return (f"Run of {now}: {mode}Python {platform.python_version()}, {os.cpu_count()} CPUs, "
            f"load average {os.getloadavg()[0]:.1f} at the end; " + ", ".join(versions)
            + f"\n\nCommand (from the repository root): `pytest {args}`")


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if not state or not state.reports:
        return
    parts = [_header(config)]
    baseline = config.getoption("--compare-ratios")
    recorded = _suite.recorded_medians(baseline) if baseline else {}
    for (path, function), (report, workloads) in state.reports.items():
        parts.append(_suite.markdown(report, workloads))
        if baseline:
            key = (Path(path).relative_to(config.rootpath).as_posix(), function)
            parts.append(_suite.ratio_drift(report, workloads, recorded.get(key, {}),
                                            str(baseline)))
    text = "\n\n".join(parts) + "\n"
    terminalreporter.write_sep("=", "peer / ours ratios (markdown for benchmarks/RESULTS.md)")
    terminalreporter.write_line(text)
    path = config.getoption("--bench-report")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        terminalreporter.write_line(f"wrote {path}")
