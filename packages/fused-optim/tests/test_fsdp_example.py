"""``examples/fsdp2_train.py`` under torchrun on 2 gloo processes: the loss falls, and a second
launch, a world of one process without torchrun, resumes from the DCP checkpoint the first one saved
(DCP reshards it from 2 ranks to 1)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from _distributed import GLOO_ABORT, requires_gloo

pytestmark = requires_gloo

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fsdp2_train.py"
SMALL = [
    "--dim",
    "32",
    "--heads",
    "2",
    "--layers",
    "1",
    "--context",
    "16",
    "--batch",
    "8",
    "--lr",
    "1e-2",
    "--log-every",
    "1",
]


def launch(args: list[str], cwd: Path, torchrun: bool = True, fresh: Path | None = None) -> str:
    """The example's output on 2 ranks (torchrun --standalone: rendezvous on localhost), or as one
    process, retried once when gloo aborts a rank (see _distributed.GLOO_ABORT); fails on any other
    error. ``fresh``: a checkpoint folder each attempt starts without (an aborted attempt may have
    saved into it, and the retry would then resume instead of training from the start)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if Path("/sys/class/net/lo").exists():
        env["GLOO_SOCKET_IFNAME"] = "lo"
    runner = (
        ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"] if torchrun else []
    )
    cmd = [sys.executable, *runner, str(EXAMPLE), *SMALL, *args]
    for _ in range(2):
        if fresh is not None:
            shutil.rmtree(fresh, ignore_errors=True)
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise AssertionError(
                f"the example passed its deadline:\n{out}\n{err[-4000:]}"
            ) from None
        if proc.returncode == 0:
            return out
        if GLOO_ABORT not in err:
            break
    raise AssertionError(f"the example failed (exit {proc.returncode}):\n{out}\n{err[-4000:]}")


def losses(out: str) -> dict[int, float]:
    return {int(s): float(v) for s, v in re.findall(r"^step\s+(\d+)\s+loss ([0-9.]+)", out, re.M)}


def test_example_trains_saves_and_resumes(tmp_path):
    ckpt = tmp_path / "ckpt"
    first = launch(["--steps", "6", "--checkpoint-dir", str(ckpt)], tmp_path, fresh=ckpt)
    seen = losses(first)
    assert sorted(seen) == [1, 2, 3, 4, 5, 6], first
    assert seen[6] < seen[1], first  # the loss goes down
    assert f"saved step 6 to {ckpt}" in first

    second = launch(["--steps", "8", "--checkpoint-dir", str(ckpt)], tmp_path, torchrun=False)
    assert "resumed from step 6" in second, second
    assert sorted(losses(second)) == [7, 8], second
