"""ci/isa_matrix.py: which CPU builds rerun which tests, and what a CPU without one does."""

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import isa_matrix as m

ROOT = Path(__file__).resolve().parents[2]
EVERYTHING = {"avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"}
ATEN_ALL = {"default": "DEFAULT", "avx2": "AVX2", "avx512": "AVX512"}


def _suites(run):
    return {suite.name for suite in run.suites}


def test_every_combination_runs_every_packages_doctests():
    assert [(r.fused_isa, r.aten) for r in m.RUNS] == [
        (isa, aten) for isa in ("baseline", "avx2", "avx512") for aten in ("default", "avx2", "avx512")]
    assert all(m.DOCTESTS in run.suites for run in m.RUNS)
    doctest_files = {arg for arg in m.DOCTESTS.args if arg.endswith(".py")}
    assert doctest_files == {str(p.relative_to(ROOT)) for p in ROOT.glob("packages/*/tests/test_doctests.py")}


def test_each_value_of_each_switch_runs_the_numerical_suites_against_the_far_ends_of_the_other():
    numeric = [(r.fused_isa, r.aten) for r in m.RUNS if m.FUSED_NUMERICS in r.suites]
    assert numeric == [(r.fused_isa, r.aten) for r in m.RUNS if m.DIFFOPT_NUMERICS in r.suites]
    assert {isa for isa, _ in numeric} == set(m.FUSED_ISAS)
    assert {aten for _, aten in numeric} == set(m.ATEN_CAPABILITIES)
    # our widest loops beside torch's scalar kernels and the reverse
    assert {("avx512", "default"), ("baseline", "avx512")} <= set(numeric)
    assert len(numeric) == 5  # each more costs CI about half a minute


@pytest.mark.parametrize("suite", [m.DOCTESTS, m.FUSED_NUMERICS, m.DIFFOPT_NUMERICS], ids=lambda s: s.name)
def test_every_path_a_suite_names_exists(suite):
    paths = [arg for arg in suite.args if arg.startswith("packages/")]
    assert paths and all((ROOT / p).exists() for p in paths)


def test_a_combination_the_cpu_cannot_run_is_skipped_with_the_reason():
    run = next(r for r in m.RUNS if r.fused_isa == "avx512" and r.aten == "avx2")
    assert m.why_not(run, EVERYTHING, ATEN_ALL) is None
    assert "no avx512f" in m.why_not(run, {"avx2"}, ATEN_ALL)
    # torch falls back silently to what the CPU has: asked for AVX-512 it may run AVX2
    run = next(r for r in m.RUNS if r.fused_isa == "baseline" and r.aten == "avx512")
    assert m.why_not(run, EVERYTHING, {**ATEN_ALL, "avx512": "AVX2"}) == "torch runs AVX2 here when asked for avx512"
    assert m.why_not(run, EVERYTHING, ATEN_ALL) is None
    # torch also takes the variable at its word where the CPU lacks the instructions (then SIGILL):
    # an AVX2-only CPU skips every avx512 capability, whatever fused-optim build it pairs with
    assert m.why_not(run, {"avx2", "fma"}, ATEN_ALL) == (
        "the CPU has no avx512f, avx512bw, avx512vl, avx512dq, which torch's avx512 kernels use")
    run = next(r for r in m.RUNS if r.fused_isa == "baseline" and r.aten == "default")
    assert m.why_not(run, set(), ATEN_ALL) is None  # the baseline needs no flag


def test_cpu_flags_and_what_torch_runs_are_read_from_this_machine():
    flags = m.cpu_flags()
    assert isinstance(flags, set)
    assert m.aten_capability(sys.executable, "default") == "DEFAULT"


def test_the_list_names_each_combination_once():
    out = subprocess.run([sys.executable, str(ROOT / "ci" / "isa_matrix.py"), "--list"], check=True,
                         capture_output=True, text=True).stdout.splitlines()
    assert len(out) == 9 and len(set(out)) == 9
    assert out[0] == ("FUSED_OPTIM_CPU_ISA=baseline ATEN_CPU_CAPABILITY=default: doctests, fused-optim numerics, "
                      "diffopt numerics")


def test_a_failing_suite_fails_the_run_and_skipped_ones_are_reported(monkeypatch, capsys):
    calls = []
    torch_runs = {"default": "DEFAULT", "avx2": "AVX2", "avx512": "AVX2"}  # an AVX2 machine

    def fake_run(cmd, **kwargs):
        env = kwargs["env"]
        if "-c" in cmd:  # the probe of what torch runs (unasked: its own choice)
            return subprocess.CompletedProcess(cmd, 0, stdout=torch_runs[env.get("ATEN_CPU_CAPABILITY", "avx2")] + "\n")
        calls.append((env["FUSED_OPTIM_CPU_ISA"], env["ATEN_CPU_CAPABILITY"]))
        assert cmd[-1] == "-x" and "--jobs=2" not in cmd  # pytest's arguments pass, ours do not
        return subprocess.CompletedProcess(cmd, 1 if "--import-mode=importlib" in cmd else 0)

    monkeypatch.setattr(m.subprocess, "run", fake_run)
    monkeypatch.setattr(m, "cpu_flags", lambda: {"avx2", "fma", "f16c"})
    assert m.main(["--jobs=2", "-x"]) == 1
    out = capsys.readouterr().out
    # no fused avx512 build, and no AVX-512 for torch's kernels either: both skipped; and the
    # machine's own pair (avx2, AVX2), which the packages' suites ran, left out
    assert sorted(set(calls)) == [("avx2", "default"), ("baseline", "avx2"), ("baseline", "default")]
    assert "ATEN_CPU_CAPABILITY=avx2: skipped: this machine's own builds" in out
    assert "skipped: the CPU has no avx512f, fused-optim" in out and "which torch's avx512 kernels use" in out
    assert "doctests FAILED (pytest exit code 1)" in out


def test_the_machines_own_pair_is_left_out_unless_asked_for(monkeypatch):
    # A process with neither variable set runs fused-optim's widest build (AVX2 needs F16C too)
    # beside torch's own choice; that pair is what the packages' suites ran under.
    assert m.native_run({"avx2", "fma", "f16c"}, "AVX2") == ("avx2", "avx2")
    assert m.native_run({"avx2", "fma"}, "AVX2") == ("baseline", "avx2")
    assert m.native_run(EVERYTHING, "AVX512") == ("avx512", "avx512")
    assert m.native_run(set(), "DEFAULT") == ("baseline", "default")
    # where the suites ran with FUSED_OPTIM_CPU_ISA set, the build it capped them to
    assert m.native_run(EVERYTHING | {"f16c"}, "AVX512", "avx2") == ("avx2", "avx512")
    assert m.native_run({"avx2", "fma", "f16c"}, "AVX2", "avx512") == ("avx2", "avx2")
    run = next(r for r in m.RUNS if r.fused_isa == "avx2" and r.aten == "avx2")
    assert "packages' suites ran" in m.why_not(run, EVERYTHING, ATEN_ALL, ("avx2", "avx2"))
    assert m.why_not(run, EVERYTHING, ATEN_ALL, ("avx512", "avx512")) is None
    assert m.why_not(run, EVERYTHING, ATEN_ALL) is None
    # --with-native runs it
    ran = []
    monkeypatch.setattr(m, "cpu_flags", lambda: EVERYTHING | {"f16c"})
    monkeypatch.setattr(m, "aten_capability", lambda python, wanted: ATEN_ALL[wanted or "avx512"])
    monkeypatch.setattr(m, "run_suite", lambda python, run, suite, args: ran.append((run.fused_isa, run.aten)) or (0, "", 0.0))
    m.main(["--jobs=1"])
    assert ("avx512", "avx512") not in ran and len(set(ran)) == 8
    ran.clear()
    m.main(["--jobs=1", "--with-native"])
    assert ("avx512", "avx512") in ran and len(set(ran)) == 9
