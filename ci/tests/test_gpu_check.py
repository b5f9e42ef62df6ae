"""ci/gpu_check.sh without a GPU: it parses, passes shellcheck where that is installed, and its dry
run collects the CUDA tests it would run and writes the one report the GPU run writes; and the
host-time probes it (and RESULTS.md) run, for a short round on the CPU."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "ci" / "gpu_check.sh"


def test_the_script_parses():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_shellcheck_finds_nothing():
    result = subprocess.run(["shellcheck", str(SCRIPT)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout


def test_a_dry_run_collects_the_cuda_tests_and_writes_the_report(tmp_path):
    pytest.importorskip("fused_optim")
    env = dict(os.environ, PYTHON=sys.executable, GPU_CHECK_SUITES="fused-optim", GPU_CHECK_BENCH="0",
               GPU_CHECK_WHEELS=str(tmp_path / "no-wheels"))
    result = subprocess.run(["bash", str(SCRIPT), "--dry-run", str(tmp_path / "out")], env=env, cwd=ROOT,
                            capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    report = (tmp_path / "out" / "gpu_report.md").read_text()
    assert "no GPU used" in report
    row = next(line for line in report.splitlines() if line.startswith("| fused-optim |"))
    selected = re.search(r"dry run: (\d+)/\d+ tests collected", row)
    assert selected and int(selected.group(1)) > 0, row  # the -m cuda selection found tests
    assert "no cp3" in report  # the missing optree-core wheel is reported
    assert "builds one for the probe" in report  # the fast path built on the GPU machine for its torch
    # The device tool brings back at most 8 files: the report and one archive of every log.
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["gpu_report.md", "logs.tar.gz"]
    with tarfile.open(tmp_path / "out" / "logs.tar.gz") as logs:
        assert "logs/tests-fused-optim.log" in logs.getnames()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found")
@pytest.mark.parametrize("probe", ["kernel_bandwidth", "launch_cost"])
def test_the_cuda_probes_compile(tmp_path, probe):
    # The CUDA programs gpu_check builds on the GPU machine: kernel_bandwidth.cu with the wheel's
    # chunk size and larger ones (the kernels' headers as the wheel compiles them, the chunk-size
    # macro taken) and launch_cost.cu (PTX only, unoptimized: the front ends' checks in seconds).
    package = ROOT / "packages" / "fused-optim"
    result = subprocess.run(
        ["nvcc", "-std=c++20", "-c", str(ROOT / "benchmarks" / "optim" / f"{probe}.cu"), "-o",
         str(tmp_path / f"{probe}.o"), "-I", str(package / "csrc"), "-I", str(package / "include"),
         "-arch=compute_80", "-code=compute_80", "-Xcicc", "-O0", "-DFUSED_OPTIM_CUDA_CHUNK_SIZE=4096",
         "-Xcompiler", "-Wall", "-Werror", "all-warnings"],
        capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_bad_option_is_refused():
    result = subprocess.run(["bash", str(SCRIPT), "--bogus"], capture_output=True, text=True, check=False)
    assert result.returncode == 2 and "usage" in result.stderr


def test_the_host_time_probe_runs_on_the_cpu():
    # What gpu_check's first probe runs on the GPU, here for two short rounds: a row per candidate
    # (SGD has no capturable variant), torch's fused step the unit of the last column.
    pytest.importorskip("fused_optim")
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "optim" / "bench_host.py"), "--steps", "3",
                             "--rounds", "2", "--optimizers", "Adam", "SGD"], cwd=ROOT, capture_output=True,
                            text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [line.split("|")[1:-1] for line in result.stdout.splitlines() if line.startswith(("| Adam", "| SGD"))]
    assert [(r[0].strip(), r[1].strip()) for r in rows] == [
        ("Adam", "fused_optim"), ("Adam", "fused_optim capturable"), ("Adam", "torch fused=True"),
        ("Adam", "torch foreach"), ("SGD", "fused_optim"), ("SGD", "torch fused=True"), ("SGD", "torch foreach")]
    assert all(float(r[2]) > 0 and float(r[3]) > 0 for r in rows)
    assert all(r[4].strip() == "1.00x" for r in rows if r[1].strip() == "torch fused=True")
    assert all(r[5].strip() == "-" for r in rows)  # (launches are counted on a GPU and in plan mode)


def test_the_host_time_probe_finds_torchs_fused_steps_by_running_one():
    # torch's fused=True support differs by device and version (Adagrad's is CPU-only under torch
    # 2.11, which made the H200 run's probe fail): a probe step decides, and a refusal means none.
    torch = pytest.importorskip("torch")
    pytest.importorskip("fused_optim")
    sys.path.insert(0, str(ROOT / "benchmarks" / "optim"))
    try:
        from bench_optim import torch_has_fused
    finally:
        sys.path.remove(str(ROOT / "benchmarks" / "optim"))
    assert torch_has_fused(torch.optim.Adam, "cpu")
    assert not torch_has_fused(torch.optim.RMSprop, "cpu")  # torch has no fused RMSprop anywhere
    assert not torch_has_fused(torch.optim.NAdam, torch.device("cpu"))


def test_the_host_time_probe_times_the_cuda_path_without_a_gpu():
    # --device plan: fused_optim's CUDA launches planned and not run (FUSED_OPTIM_EMULATE_CUDA=plan,
    # set by the script itself), so only fused_optim's rows, fused_optim the unit.
    pytest.importorskip("fused_optim")
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "optim" / "bench_host.py"), "--device", "plan",
                             "--steps", "3", "--rounds", "1", "--optimizers", "SGD", "NAdam"], cwd=ROOT,
                            capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "CUDA launches planned and not run" in result.stdout
    rows = [line.split("|")[1:-1] for line in result.stdout.splitlines() if line.startswith(("| SGD", "| NAdam"))]
    assert [(r[0].strip(), r[1].strip()) for r in rows] == [
        ("SGD", "fused_optim"), ("NAdam", "fused_optim"), ("NAdam", "fused_optim capturable")]
    assert all(float(r[2]) > 0 for r in rows) and rows[0][4].strip() == "1.00x"
    # The planned launches of a step on 200 tensors: SGD's in one; NAdam's argument holds fewer
    # (fused_optim._C.CUDA_LAUNCH's slots_per_launch), so two, each followed by the kernel that
    # advances its state scalars (mu_product) once its blocks are done.
    assert [r[5].strip() for r in rows] == ["1", "4", "4"]


def test_the_host_time_probe_times_cold_steps():
    # --cold MB: a host buffer written before each timed step, so the step starts with its data out
    # of the caches; the device column is left out (the device waits on the host's writes).
    pytest.importorskip("fused_optim")
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "optim" / "bench_host.py"), "--device", "plan",
                             "--steps", "3", "--rounds", "1", "--cold", "1", "--optimizers", "SGD"], cwd=ROOT,
                            capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "cold caches: 1 MB written on the host before each timed step" in result.stdout
    rows = [line.split("|")[1:-1] for line in result.stdout.splitlines() if line.startswith("| SGD")]
    assert [(r[0].strip(), r[1].strip(), r[3].strip()) for r in rows] == [("SGD", "fused_optim", "-")]
    assert float(rows[0][2]) > 0


def test_the_wrapper_probe_runs_on_the_cpu():
    # benchmarks/optim/bench_wrappers.py (RESULTS.md's wrapper table) for one short round: a row
    # per optimizer, every figure positive.
    pytest.importorskip("fused_optim")
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "optim" / "bench_wrappers.py"), "--tensors",
                             "4", "--rounds", "1", "--calls", "2", "--optimizers", "SGD", "NAdam"], cwd=ROOT,
                            capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [line.split("|")[1:-1] for line in result.stdout.splitlines() if line.startswith(("| SGD", "| NAdam"))]
    assert [r[0].strip() for r in rows] == ["SGD", "NAdam"]
    assert all(float(r[i]) > 0 for r in rows for i in (1, 2)) and "foreach=True" in rows[1][3]


def test_the_adafactor_probe_runs_on_the_cpu():
    # benchmarks/optim/bench_adafactor.py (RESULTS.md's Adafactor-on-many-tensors table) for two
    # rounds on small matrices in bfloat16: one JSON line, both medians positive, the ratio theirs.
    pytest.importorskip("fused_optim")
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "optim" / "bench_adafactor.py"), "--shape",
                             "3x4", "--tensors", "3", "--rounds", "2", "--dtype", "bfloat16"], cwd=ROOT,
                            capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    row = json.loads(result.stdout)
    assert row["case"] == "3 x 3x4 bfloat16, 1 thread(s)"
    assert row["fused_optim_us"] > 0 and row["torch_foreach_us"] > 0
    assert row["torch_foreach / fused_optim"] == pytest.approx(row["torch_foreach_us"] / row["fused_optim_us"], abs=0.02)
