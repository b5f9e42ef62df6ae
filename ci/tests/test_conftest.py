"""The checkout's conftest.py: ``once_per_run`` computes a shared result once per pytest run, however
many pytest-xdist workers draw the tests that need it (the distributed tests' scenarios)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Eight tests on a module-scoped fixture; each call of compute() appends a line to COMPUTED. The
# sleep keeps the first worker inside compute() while the other worker draws a test.
SUITE = '''
import os, time
import pytest

COMPUTED = {computed!r}


def compute(fail_first):
    with open(COMPUTED, "a") as log:
        log.write(os.environ.get("PYTEST_XDIST_WORKER", "main") + "\\n")
    time.sleep(1.0)
    if fail_first and sum(1 for _ in open(COMPUTED)) == 1:
        raise RuntimeError("the first run of the scenario fails")
    return {{"ranks": [0, 1], "by": os.environ.get("PYTEST_XDIST_WORKER", "main")}}


@pytest.fixture(scope="module")
def shared(once_per_run):
    return once_per_run("scenario", lambda: compute({fail_first}))


@pytest.mark.parametrize("i", range(8))
def test_reads_the_scenario(shared, i):
    assert shared["ranks"] == [0, 1]
    print("worker", os.environ.get("PYTEST_XDIST_WORKER", "main"), "read", shared["by"])
'''


def run_suite(tmp_path: Path, *args: str, fail_first: bool = False) -> tuple[subprocess.CompletedProcess, list[str]]:
    computed = tmp_path / "computed.txt"
    (tmp_path / "test_suite.py").write_text(SUITE.format(computed=str(computed), fail_first=fail_first))
    # The conftest loaded as a plugin: the suite lies outside the checkout. Its own basetemp, so
    # the run leaves nothing in the shared one.
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("PYTEST_XDIST_WORKER", None)  # this test's own worker's, when CI runs it under xdist
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider", "-q", "-rA",
         "--rootdir", str(tmp_path), "--basetemp", str(tmp_path / "basetemp"), *args, str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
    )
    lines = computed.read_text().split() if computed.exists() else []
    return result, lines


def test_two_workers_compute_it_once_and_both_read_it(tmp_path):
    result, computed = run_suite(tmp_path, "-n", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(computed) == 1, computed
    # Both workers ran tests, and the one that did not compute read the other's result.
    readers = {line.split()[1] for line in result.stdout.splitlines() if line.startswith("worker ")}
    assert readers == {"gw0", "gw1"}, result.stdout
    assert f"read {computed[0]}" in result.stdout


def test_a_failed_computation_is_run_again_by_the_next_worker(tmp_path):
    result, computed = run_suite(tmp_path, "-n", "2", fail_first=True)
    assert len(computed) == 2 and set(computed) == {"gw0", "gw1"}, computed
    assert "the first run of the scenario fails" in result.stdout
    assert f"read {computed[1]}" in result.stdout


def test_without_workers_it_computes_in_the_process(tmp_path):
    result, computed = run_suite(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert computed == ["main"]
