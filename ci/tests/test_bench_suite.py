"""benchmarks/_suite.py: contenders interleaved round by round, failures kept apart, the ratio
tables and verdict, and ratios against a recorded run."""

import itertools
import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import _suite


def test_rounds_rotate_the_order_and_a_failing_contender_leaves_the_others_running():
    calls = []

    def contender(name, fail_on=None):
        def run():
            calls.append(name)
            if fail_on is not None and calls.count(name) == fail_on:
                raise ValueError(f"{name} broke")
        return run

    fns = {"a": contender("a"), "b": contender("b", fail_on=3), "c": contender("c")}
    samples, loops, _, errors = _suite.run_interleaved(fns, _suite.Timing(rounds=4, warmup=1))
    # the warm-up, then the balanced orders of _suite.round_order: abc, cba (b fails), then the
    # orders of a and c from the third round of their cycle on: ac, ca
    assert calls == list("abc") + list("abc") + list("cba") + list("ac") + list("ca")
    assert [len(samples[n]) for n in "abc"] == [4, 1, 4]
    assert str(errors["b"]) == "b broke" and set(errors) == {"b"}
    assert loops == {"a": 1, "b": 1, "c": 1}
    assert all(t >= 0 for t in samples["a"])


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
def test_a_cycle_of_round_orders_gives_every_contender_each_neighbour_equally_often(n):
    names = [chr(ord("a") + i) for i in range(n)]
    cycle = [_suite.round_order(names, r) for r in range(2 * n)]
    assert all(sorted(order) == names for order in cycle)  # every contender once per round
    assert _suite.round_order(names, 2 * n + 1) == cycle[1]  # the cycle repeats
    # who runs just before whom, within rounds and across the seams between rounds
    sequence = [name for order in cycle for name in order]
    follows = {}
    for before, after in itertools.pairwise(sequence):
        if before != after:
            follows[(before, after)] = follows.get((before, after), 0) + 1
    for i, name in enumerate(names):
        neighbours = {names[i - 1], names[(i + 1) % n]} - {name}
        counts = [follows.get((other, name), 0) for other in neighbours]
        assert len(set(counts)) <= 1, (name, follows)  # each neighbour equally often
    assert _suite.round_order([], 3) == []


def test_self_timed_contenders_report_their_own_seconds_and_figures():
    fns = {"x": lambda: {"seconds": 0.5, "cpu": 2.0}, "y": lambda: 0.25}
    samples, _, extras, _ = _suite.run_interleaved(
        fns, _suite.Timing(rounds=2, warmup=0, self_timed=True))
    assert samples == {"x": [0.5, 0.5], "y": [0.25, 0.25]}
    assert extras == {"x": [{"cpu": 2.0}, {"cpu": 2.0}], "y": []}


def test_a_peer_failure_is_a_skip_and_ours_is_an_error():
    def broken():
        raise RuntimeError("no")

    built = {"ours": broken, "peer": broken, "absent": "not installed"}
    workload = _suite.race_workload({"size": 1}, ["ours", "peer", "absent", "other"],
                                    lambda: built, _suite.Timing(rounds=1, warmup=0), ["ours"])
    assert list(workload.outcomes) == ["ours", "peer", "absent", "other"]
    ours, peer, absent, other = workload.outcomes.values()
    assert ours.skipped is None and isinstance(ours.error, RuntimeError)
    assert peer.skipped == "RuntimeError: no"
    assert absent.skipped == "not installed"
    assert other.skipped == "not a contender of this workload"


def _workload(params, medians):
    return _suite.Workload(params, {name: _suite.Outcome([t, t, 10 * t]) for name, t in
                                    medians.items()}, load=(1.0, 2.0))


def test_ratio_table_summary_and_verdict():
    report = _suite.Report(
        title="area",
        pairs=[_suite.Pair("peer", "ours", 2.0, lambda p: p["n"] == 1, "n=1"),
               _suite.Pair(("peer", "peer2"), ("ours",), name="best")])
    done = [_workload({"n": 1}, {"ours": 1.0, "peer": 3.0, "peer2": 0.5}),
            _workload({"n": 2}, {"ours": 2.0, "peer": 1.0})]
    text = _suite.markdown(report, done)
    rows = [line for line in text.splitlines() if line.startswith("| 1 ") or line.startswith("| 2 ")]
    # medians 1 s / 3 s / 0.5 s; ratios peer/ours 3.00 and best-of 0.50
    assert rows[0].split(" | ")[1:6] == ["1.000 s", "3.000 s", "500.000 ms", "3.00", "0.50"]
    assert rows[1].split(" | ")[1:6] == ["2.000 s", "1.000 s", "-", "0.50", "0.50"]
    assert "Verdict: 1 of 1 targets met." in text
    comparisons = {c.name: c for c in _suite.comparisons(report, done)}
    assert comparisons["peer / ours"].targeted == ["n=1"]
    assert comparisons["best"].ratios == {"n=1": 0.5, "n=2": 0.5}


def test_ratios_against_a_recorded_run(tmp_path):
    record = {"benchmarks": [
        {"fullname": f"benchmarks/x/test_x.py::test_x[{w}-{c}]", "stats": {"median": t},
         "extra_info": {"workload": w, "contender": c}}
        for w, c, t in [("1", "ours", 1.0), ("1", "peer", 2.0), ("2", "ours", 1.0),
                        ("2", "peer", 2.0)]]}
    path = tmp_path / "x.json"
    path.write_text(json.dumps(record))
    recorded = _suite.recorded_medians(path)[("benchmarks/x/test_x.py", "test_x")]
    assert recorded == {"1": {"ours": 1.0, "peer": 2.0}, "2": {"ours": 1.0, "peer": 2.0}}
    report = _suite.Report(title="x", pairs=[_suite.Pair("peer", "ours")])
    now = [_workload({"n": 1}, {"ours": 1.0, "peer": 1.0}),
           _workload({"n": 2}, {"ours": 1.0, "peer": 2.1})]
    text = _suite.ratio_drift(report, now, recorded, "x.json")
    assert "| peer / ours | 1 | 2.00 | 1.00 | -50% **fell** |" in text
    assert "| peer / ours | 2 | 2.00 | 2.10 | +5% |" in text
    assert "1 ratio(s) fell by more than 10%" in text


@pytest.mark.parametrize(("seconds", "text"), [(2.5e-6, "2.50 us"), (0.0125, "12.500 ms"),
                                               (3.0, "3.000 s"), (None, "-")])
def test_times_are_printed_in_a_readable_unit(seconds, text):
    assert _suite.fmt_seconds(seconds) == text


AREA_MODULE = '''
import time

import _suite
import pytest

built = []
REPORT = _suite.Report(title="area", pairs=[_suite.Pair("peer", "ours", 1.0)])


@pytest.mark.parametrize("contender", ["ours", "peer", "absent"])
@pytest.mark.parametrize("size", [1, 2])
def test_area(race, size, contender):
    def build():
        built.append(size)
        return {"ours": lambda: time.sleep(1e-4), "peer": lambda: time.sleep(2e-4),
                "absent": "not installed here"}

    race(build, rounds=3)


def test_each_workload_is_built_once():
    assert built == [1, 2]
'''


def test_the_race_fixture_feeds_pytest_benchmark_and_closes_with_the_ratio_tables(tmp_path):
    """A small suite through pytest: one build per workload, every contender's interleaved
    samples in --benchmark-json as its rounds, a missing peer skipped, the tables at the end."""
    pytest.importorskip("pytest_benchmark")
    import shutil
    import subprocess

    bench = tmp_path / "benchmarks"
    (bench / "area").mkdir(parents=True)
    for name in ("conftest.py", "_suite.py", "_report.py"):
        shutil.copy(Path(_suite.__file__).with_name(name), bench / name)
    (bench / "area" / "test_area.py").write_text(AREA_MODULE)
    # A session of its own: not an xdist worker, though this test may run in one (pytest-benchmark
    # reads PYTEST_XDIST_WORKER from the environment and would then write no JSON).
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    out = subprocess.run(
        [sys.executable, "-m", "pytest", str(bench / "area"), "-p", "no:cacheprovider", "-q",
         f"--benchmark-json={tmp_path / 'results' / 'area.json'}",
         f"--bench-report={tmp_path / 'area.md'}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "5 passed, 2 skipped" in out.stdout
    run = json.loads((tmp_path / "results" / "area.json").read_text())
    benches = {(b["extra_info"]["workload"], b["extra_info"]["contender"]): b
               for b in run["benchmarks"]}
    assert set(benches) == {("1", "ours"), ("1", "peer"), ("2", "ours"), ("2", "peer")}
    for (workload, _), b in benches.items():
        assert b["group"] == f"area: {workload}" and len(b["stats"]["data"]) == 3
        assert b["extra_info"]["ours"] == (b["extra_info"]["contender"] == "ours")
    report = (tmp_path / "area.md").read_text()
    assert "| size | ours median | peer median | absent median | peer / ours |" in report
    assert "| 1 | " in report and "| skip | " in report
    assert "Verdict: " in report
