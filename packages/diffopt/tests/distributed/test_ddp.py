"""DistributedDataParallel around a module whose forward runs a differentiable inner loop.

Two gloo processes on loopback (torchrun --standalone), each under the hard deadline of
``test_distributed.finish``: the meta-gradient DDP leaves in ``.grad`` is the mean of the ranks'
own meta-gradients, with MetaSGD, MetaAdam and the functional API (``_ddp_scenario.py``), and the
example trains under torchrun.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch.distributed as dist
from test_distributed import finish

HERE = Path(__file__).parent
EXAMPLE = HERE.parents[1] / "examples" / "distributed" / "learned_dataset_ddp.py"

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="PyTorch built without torch.distributed / gloo")


def torchrun(args: list[str], cwd: Path) -> subprocess.Popen:
    # --standalone: the rendezvous on localhost at a free port; gloo's own connections go through
    # the loopback interface too (on Linux, where it is `lo`), so nothing leaves the machine.
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if Path("/sys/class/net/lo").exists():
        env["GLOO_SOCKET_IFNAME"] = "lo"
    return subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                             *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


# gloo's C++ occasionally aborts a rank ("terminate called without an active exception", no
# Python traceback) on this loaded 2-core CI box; seen twice in ~10 full runs, never in isolation.
# Such a run says nothing about the meta-gradient, so it is retried once; any other failure, or
# the abort twice in a row, fails the test.
GLOO_ABORT = "terminate called without an active exception"


def run_torchrun(args: list[str], cwd: Path) -> tuple[int, str, str]:
    ((rc, out, err),) = finish([torchrun(args, cwd)], deadline_s=90)
    if rc != 0 and GLOO_ABORT in err:
        ((rc, out, err),) = finish([torchrun(args, cwd)], deadline_s=90)
    return rc, out, err


def scenario_result(tmp_path_factory, name: str) -> dict:
    """``_{name}_scenario.py`` run under torchrun: the JSON it wrote."""
    tmp = tmp_path_factory.mktemp(name)
    rc, _, err = run_torchrun([str(HERE / f"_{name}_scenario.py"), str(tmp / "result.json")], tmp)
    assert rc == 0, err[-4000:]
    return json.loads((tmp / "result.json").read_text())


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory, once_per_run):
    # once_per_run (the checkout's conftest.py): one pytest-xdist worker runs it for all of them.
    return once_per_run(__name__, lambda: scenario_result(tmp_path_factory, "ddp"))


@pytest.mark.parametrize("inner", ["meta-sgd", "meta-adam", "functional"])
def test_ddp_meta_gradient_is_the_mean_of_the_ranks(ddp_run, inner):
    run = ddp_run[inner]
    assert ddp_run["world"] == 2 and run["dtype"] == "torch.float64"
    assert run["mean_norm"] > 1e-3
    assert run["rank_spread"] > 1e-3  # the ranks' meta-gradients differ: the mean is a real check
    assert run["diff_from_mean"] <= 1e-10
    # Exactly: all-reduce hands every rank the same bits, and each applies the same step to them.
    assert run["points_spread_after_step"] == 0.0


def test_example_trains_under_torchrun(tmp_path):
    rc, out, err = run_torchrun([str(EXAMPLE), "--iterations", "60", "--inner", "meta-adam"], tmp_path)
    assert rc == 0, err[-4000:]
    assert "learned dataset with DDP: 2 rank(s), inner loop meta-adam" in out
    losses = out.split("first -> last 10 steps | ")[1].split(" |")[0].split(" -> ")
    assert float(losses[1]) < float(losses[0])
    before, after = out.split("on the points | ")[1].split(" |")[0].split(" -> ")
    assert float(after.split("%")[0]) > float(before.split("%")[0]) + 20
