"""The benchmark suite's machinery: one workload's contenders timed round-robin, their samples fed
to pytest-benchmark, and the peer/ours ratio tables that close a session.

pytest-benchmark times one test after another, so on a shared, noisy machine a burst of load can
land on one contender's rounds and skew a ratio. Here the first test of a workload (the tests
that differ only in their ``contender`` parameter) times every selected contender of that
workload in interleaved rounds, in balanced orders (:func:`round_order`); each contender's test then hands
its own samples to its ``benchmark`` fixture. So ``--benchmark-json``, ``--benchmark-compare``
and ``--benchmark-histogram`` see ordinary pytest-benchmark results, and the ratios are taken
from samples that shared the same load.

A test module declares a :class:`Report` (``REPORT``) and writes its tests as::

    @pytest.mark.parametrize("contender", CONTENDERS)
    @pytest.mark.parametrize("size", SIZES)
    def test_something(race, size, contender):
        race(lambda: {"ours": ..., "peer": ... or "why it cannot run"}, rounds=...)

where the builder returns one callable per contender (or a string saying why that contender
cannot run here: its test is skipped, the others still run). Quick mode (``--quick`` or
``BENCH_QUICK=1``) is for the CI smoke run: modules pick tiny workloads and rounds are 1.
"""

from __future__ import annotations

import gc
import math
import os
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import _report

QUICK = os.environ.get("BENCH_QUICK", "").strip().lower() not in ("", "0", "false", "no")
ROUNDS: int | None = None  # --rounds: overrides every module's default


def quick() -> bool:
    """Whether the suite runs in quick (smoke) mode: tiny workloads, one round."""
    return QUICK


def pick(full: Any, quick_value: Any) -> Any:
    return quick_value if QUICK else full


# --- timing ---------------------------------------------------------------------------------------


def calibrate(fn: Callable[[], Any], min_time: float,
              clock: Callable[[], float] = time.perf_counter) -> int:
    """Calls per sample so that one sample lasts at least ``min_time`` by ``clock`` (timeit's
    autorange; ``time.thread_time`` to count CPU time only)."""
    loops = 1
    while True:
        start = clock()
        for _ in range(loops):
            fn()
        elapsed = clock() - start
        if elapsed >= min_time or loops >= 1 << 20:
            return loops
        loops *= 2 if elapsed == 0 else max(2, min(10, int(min_time / elapsed) + 1))


@dataclass
class Timing:
    """How one workload is timed. ``self_timed``: each call returns its own seconds (or a dict
    with ``"seconds"`` and extra figures), for contenders timed inside a child process."""

    rounds: int
    warmup: int = 1
    min_time: float = 0.0
    disable_gc: bool = False
    self_timed: bool = False
    sync: Callable[[], None] | None = None


def round_order(names: list[str], r: int) -> list[str]:
    """The order of round ``r``, from a cycle of ``2 * len(names)`` rounds that runs every
    rotation of ``names`` once forwards and once backwards.

    A contender runs on the caches and the allocator left by the one before it, and after a
    heavy contender (a Python loop over tasks) the next one pays for that (on the vmapped MAML
    MLP, ~0.3 ms of 3.3). With plain rotations the second name followed the first in two rounds
    out of three and the third name in one: a bias of a few per cent on their ratio. In this
    cycle every contender follows each of its two neighbours in the list equally often, and
    each round starts with the contender that ended the one before (so rounds do not add
    pairs of their own): for three contenders, every other contender twice in six rounds.
    Rounds in multiples of ``2 * len(names)`` are balanced.
    """
    n = len(names)
    if n == 0:
        return []
    i = r % (2 * n)

    def rotation(k: int) -> list[str]:
        return names[k:] + names[:k]

    if i == 0:
        return rotation(0)
    if i <= n:  # rotation i - 1 backwards: it starts with the last round's last contender
        return rotation(i - 1)[::-1]
    return rotation(2 * n - i)  # rotations n - 1 down to 1, each starting where the last ended


def run_interleaved(fns: dict[str, Callable[[], Any]], timing: Timing
                    ) -> tuple[dict[str, list[float]], dict[str, int], dict[str, list[dict]],
                               dict[str, BaseException]]:
    """Seconds per call of every callable, round after round in balanced orders; the loop count
    per sample of each; for self-timed callables, the extra figures each call returned; and the
    error of each callable that raised (it is dropped from the later rounds, so a peer that
    cannot run a workload does not stop the others)."""
    loops: dict[str, int] = {}
    errors: dict[str, BaseException] = {}
    for name, fn in fns.items():
        try:
            for _ in range(timing.warmup):
                fn()
            loops[name] = calibrate(fn, timing.min_time) if timing.min_time > 0 else 1
        except Exception as exc:
            errors[name] = exc
    samples: dict[str, list[float]] = {name: [] for name in fns}
    extras: dict[str, list[dict]] = {name: [] for name in fns}
    gc_was_enabled = gc.isenabled()
    try:
        for r in range(timing.rounds):
            names = [name for name in fns if name not in errors]
            if timing.disable_gc:
                gc.collect()  # between rounds, outside the clock
                gc.disable()
            for name in round_order(names, r):
                try:
                    seconds, figures = _sample(fns[name], loops.get(name, 1), timing)
                except Exception as exc:
                    errors[name] = exc
                    continue
                samples[name].append(seconds)
                if figures:
                    extras[name].append(figures)
            if gc_was_enabled:
                gc.enable()
    finally:
        if gc_was_enabled:
            gc.enable()
    return samples, loops, extras, errors


def _sample(fn: Callable[[], Any], loops: int, timing: Timing) -> tuple[float, dict]:
    """One sample: seconds per call, and the extra figures of a self-timed call."""
    if timing.self_timed:
        got = fn()
        figures = dict(got) if isinstance(got, dict) else {"seconds": got}
        return float(figures.pop("seconds")), figures
    if timing.sync:
        timing.sync()
    start = time.perf_counter()
    for _ in range(loops):
        fn()
    if timing.sync:
        timing.sync()
    return (time.perf_counter() - start) / loops, {}


# --- one workload ---------------------------------------------------------------------------------


@dataclass
class Outcome:
    """One contender on one workload: its samples, or why it did not run."""

    samples: list[float] = field(default_factory=list)
    loops: int = 1
    extras: list[dict] = field(default_factory=list)
    skipped: str | None = None
    error: BaseException | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def best(self) -> float:
        return min(self.samples)


@dataclass
class Workload:
    """Every contender of one workload, timed together, and what the module noted about it."""

    params: dict[str, Any]
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)
    load: tuple[float, float] = (math.nan, math.nan)

    def medians(self) -> dict[str, float]:
        return {name: o.median for name, o in self.outcomes.items() if o.samples}


def race_workload(params: dict[str, Any], selected: list[str], build: Callable[[], Any],
                  timing: Timing, ours: Iterable[str]) -> Workload:
    """Build the workload's contenders and time those selected, interleaved.

    ``build()`` returns ``{contender: callable | reason}`` or ``(that, info)``; a contender that
    raises is recorded with its error (re-raised in its own test when it is ours, a skip for a
    peer that cannot run the workload).
    """
    built = build()
    contenders, info = built if isinstance(built, tuple) else (built, {})
    workload = Workload(params, info=dict(info))
    fns = {}
    for name in selected:
        fn = contenders.get(name, "not a contender of this workload")
        if isinstance(fn, str):
            workload.outcomes[name] = Outcome(skipped=fn)
        else:
            fns[name] = fn
    start_load = os.getloadavg()[0]
    if fns:
        samples, loops, extras, errors = run_interleaved(fns, timing)
        for name in fns:
            if name in errors:
                exc = errors[name]
                # Ours failing fails its test; a peer that cannot run the workload is a skip.
                reason = None if name in ours else f"{type(exc).__name__}: {exc}"[:300]
                workload.outcomes[name] = Outcome(error=exc, skipped=reason)
            else:
                workload.outcomes[name] = Outcome(samples[name], loops[name], extras[name])
    workload.load = (start_load, os.getloadavg()[0])
    workload.outcomes = {name: workload.outcomes[name] for name in selected}  # the tests' order
    return workload


def feed(benchmark: Any, outcome: Outcome) -> None:
    """Hand a contender's interleaved samples to its pytest-benchmark fixture as its rounds."""
    if benchmark.disabled:  # --benchmark-disable: the code ran, nothing is recorded
        benchmark._mode = "interleaved rounds"
        return
    if not hasattr(benchmark, "_make_stats"):
        raise RuntimeError("this pytest-benchmark has no BenchmarkFixture._make_stats; the suite "
                           "needs pytest-benchmark>=5.1,<6 (ci/requirements-dev.txt)")
    benchmark._mode = "interleaved rounds"  # what the fixture checks to know it was used
    stats = benchmark._make_stats(outcome.loops)
    for seconds in outcome.samples:
        stats.update(seconds * outcome.loops)  # Metadata.update divides by the iterations


# --- the report -----------------------------------------------------------------------------------


@dataclass
class Pair:
    """One ratio column: ``peer`` time / ``ours`` time, with the issue's target if any.

    ``scope`` limits the target to some rows (``covers(params)``), named by ``scope_text``.
    """

    peer: str | tuple[str, ...]  # a tuple: the best (lowest median) of those contenders
    ours: str | tuple[str, ...]
    target: float | dict[str, float] | None = None  # a dict: per value of the report's series
    covers: Callable[[dict[str, Any]], bool] | None = None
    scope_text: str = ""
    name: str = ""

    def label(self, series: str = "") -> str:
        base = self.name or f"{_side_name(self.peer)} / {_side_name(self.ours)}"
        return f"{base} {series}".strip()

    def ratio(self, medians: dict[str, float]) -> float | None:
        peer, ours = _side_median(self.peer, medians), _side_median(self.ours, medians)
        return None if peer is None or ours is None else peer / ours


def _names(side: str | tuple[str, ...]) -> tuple[str, ...]:
    return (side,) if isinstance(side, str) else side


def _side_name(side: str | tuple[str, ...]) -> str:
    return side if isinstance(side, str) else "best of " + ", ".join(side)


def _side_median(side: str | tuple[str, ...], medians: dict[str, float]) -> float | None:
    present = [medians[name] for name in _names(side) if name in medians]
    return min(present) if present else None


@dataclass
class Report:
    """How a test module's results read in the closing summary.

    ``pairs`` lists the ratio columns; ``series`` names a workload parameter whose values split
    every pair into separate comparisons (pytree's ``op``); ``notes`` returns extra lines
    (correctness checks, memory) from the workloads. ``ours`` defaults to every pair's ``ours``:
    the contenders whose failure fails their test (a peer's failure is a skip).
    """

    title: str
    pairs: list[Pair]
    series: str | None = None
    note: str = "ratio = peer time / our time (medians); above 1: ours is faster"
    notes: Callable[[list[Workload]], list[str]] | None = None
    ours: tuple[str, ...] = ()
    threads: int | None = None  # torch intra-op threads while the module runs (--threads)

    def __post_init__(self) -> None:
        if not self.ours:
            self.ours = tuple(dict.fromkeys(name for p in self.pairs for name in _names(p.ours)))


def fmt_seconds(seconds: float | None) -> str:
    if seconds is None or not math.isfinite(seconds):
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.2f} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds:.3f} s"


def _row_label(params: dict[str, Any], skip: str | None = None) -> str:
    """``mlp sgd steps=3``: strings as they are, numbers named by their parameter."""
    return " ".join(v if isinstance(v, str) else f"{k}={v}" for k, v in params.items() if k != skip)


def markdown(report: Report, workloads: list[Workload]) -> str:
    """The median table with its ratio columns, then the summary and verdict lines."""
    contenders = list(dict.fromkeys(name for w in workloads for name in w.outcomes))
    columns = list(dict.fromkeys(k for w in workloads for k in w.params))
    pairs = [p for p in report.pairs if set(_names(p.peer) + _names(p.ours)) & set(contenders)]
    header = [*columns, *(f"{c} median" for c in contenders), *(p.label() for p in pairs),
              "rounds", "load avg"]
    lines = [f"## {report.title}", "", "| " + " | ".join(header) + " |",
             "|" + "---|" * len(columns) + "---:|" * (len(header) - len(columns))]
    for w in workloads:
        medians = w.medians()
        cells = [str(w.params.get(k, "")) for k in columns]
        cells += [fmt_seconds(medians.get(c)) if c in medians else
                  ("skip" if w.outcomes.get(c) and w.outcomes[c].skipped else "-")
                  for c in contenders]
        for p in pairs:
            ratio = p.ratio(medians)
            cells.append("-" if ratio is None else f"{ratio:.2f}")
        rounds = max((len(o.samples) for o in w.outcomes.values()), default=0)
        cells += [str(rounds), f"{w.load[0]:.1f} -> {w.load[1]:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    if report.notes:
        extra = report.notes(workloads)
        if extra:
            lines += ["", *extra]
    lines += ["", _report.summary_table(comparisons(report, workloads), title="Summary",
                                        note=report.note)]
    return "\n".join(lines)


def comparisons(report: Report, workloads: list[Workload]) -> list[_report.Comparison]:
    out = []
    for pair in report.pairs:
        series_values = list(dict.fromkeys(
            w.params.get(report.series) for w in workloads)) if report.series else [None]
        for value in series_values:
            label = pair.label("" if value is None else str(value))
            target = pair.target.get(str(value)) if isinstance(pair.target, dict) else pair.target
            comparison = _report.Comparison(label, target, scope=pair.scope_text)
            for w in workloads:
                if value is not None and w.params.get(report.series) != value:
                    continue
                targeted = pair.covers(w.params) if pair.covers else True
                comparison.add(_row_label(w.params, report.series), pair.ratio(w.medians()),
                               targeted=targeted)
            out.append(comparison)
    return out


# --- against a recorded run -----------------------------------------------------------------------


def recorded_medians(path: Any) -> dict[tuple[str, str], dict[str, dict[str, float]]]:
    """``{(test file, test function): {workload: {contender: median}}}`` from a run's
    ``--benchmark-json`` file (the record kept in benchmarks/results)."""
    import json

    data = json.loads(open(path).read())  # noqa: SIM115 (a short read)
    out: dict[tuple[str, str], dict[str, dict[str, float]]] = {}
    for bench in data.get("benchmarks", []):
        info = bench.get("extra_info", {})
        if "contender" not in info or "workload" not in info:
            continue
        file, _, name = bench["fullname"].partition("::")
        key = (file, name.split("[")[0])
        out.setdefault(key, {}).setdefault(info["workload"], {})[info["contender"]] = (
            bench["stats"]["median"])
    return out


def ratio_drift(report: Report, workloads: list[Workload], recorded: dict[str, dict[str, float]],
                source: str, tolerance: float = 0.1) -> str:
    """Each ratio of this run against the same ratio in a recorded run. Ratios, unlike absolute
    times, hardly move with the load on a shared machine, so a ratio that fell by more than
    ``tolerance`` is a regression (or a peer that got faster) worth a look."""
    lines = [f"### Against the recorded run ({source}): ratios now and then", "",
             "| comparison | workload | recorded | now | change |", "|---|---|---:|---:|---:|"]
    fallen = 0
    for w in workloads:
        label = " ".join(str(v) for v in w.params.values())
        then = recorded.get(label)
        if not then:
            continue
        for pair in report.pairs:
            old, new = pair.ratio(then), pair.ratio(w.medians())
            if old is None or new is None:
                continue
            change = new / old - 1
            flag = " **fell**" if change < -tolerance else ""
            fallen += bool(flag)
            lines.append(f"| {pair.label()} | {label} | {old:.2f} | {new:.2f} | "
                         f"{change:+.0%}{flag} |")
    if len(lines) == 4:
        return f"(no workload of this run is in the recorded run {source})"
    lines += ["", f"{fallen} ratio(s) fell by more than {tolerance:.0%} against the record."]
    return "\n".join(lines)


# --- the scripts' command lines -------------------------------------------------------------------


def run_suite(test_file: Any, argv: list[str]) -> int:
    """``python benchmarks/<area>/bench_<area>.py [pytest options]``: the area's suite module
    through pytest (the scripts keep only their workloads and child-process roles)."""
    import pytest

    return int(pytest.main([str(test_file), "-p", "no:cacheprovider", *argv]))
