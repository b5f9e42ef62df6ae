"""The drop-in optimizers on sharded models: FSDP2 (with and without resharding after forward, with a
bfloat16 mixed-precision policy), tensor parallelism, FSDP + TP on a 2-D mesh, and DCP checkpoints
moving between fused_optim and torch.optim. The ranks run ``_sharded.py``'s scenarios (one launch
per world size); the tests here assert on their records, one test per optimizer and case."""

from __future__ import annotations

import pytest
from _distributed import check, requires_gloo, run_scenario
from _sharded import CONFIGS, KWARGS, RESEARCH, TORCH_FAILS, checkpoint_readers, scenario

pytestmark = requires_gloo

NAMES = list(KWARGS)
TOL = 1e-5  # float32 after 3 steps, against the unsharded twin (sums in other orders)


# once_per_run (the checkout's conftest.py): one pytest-xdist worker runs each world's scenario.
@pytest.fixture(scope="module")
def world2(tmp_path_factory: pytest.TempPathFactory, once_per_run) -> dict:
    configs = [c for c, (world, _) in CONFIGS.items() if world == 2]
    path = str(tmp_path_factory.mktemp("dcp"))
    return once_per_run(f"{__name__}.world2", lambda: run_scenario(
        scenario, 2, deadline_s=400.0, configs=configs, names=NAMES, checkpoint_dir=path
    )[0])


@pytest.fixture(scope="module")
def world4(once_per_run) -> dict:
    configs = [c for c, (world, _) in CONFIGS.items() if world == 4]
    return once_per_run(f"{__name__}.world4", lambda: run_scenario(
        scenario, 4, deadline_s=400.0, configs=configs, names=NAMES
    )[0])


def test_every_fused_optimizer_is_covered():
    import fused_optim

    # Muon takes matrices only (this model has biases and norms): its DTensor steps, sharded
    # matrices gathered for Newton-Schulz, are checked in test_dtensor.py
    assert sorted([*NAMES, "Muon"]) == sorted(fused_optim.optim.__all__)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("config", list(CONFIGS))
def test_fused_optimizer_on_sharded_model_matches_unsharded_twin(config, name, request):
    results = request.getfixturevalue("world4" if CONFIGS[config][0] == 4 else "world2")
    record = check(results, f"{config}/{name}/fused")
    assert record["moved"] > 1e-3  # the 3 steps did change the parameters
    assert record["max_diff"] <= TOL, record


@pytest.mark.parametrize("name", [n for n in NAMES if n not in RESEARCH])
def test_torch_optim_on_the_same_mesh(world2, name):
    """The harness against torch.optim itself; and where torch.optim's class raises on DTensor
    parameters (TORCH_FAILS), the record that it does, while fused_optim's runs (test above)."""
    entry = world2[f"fsdp/{name}/torch"]
    if name in TORCH_FAILS:
        assert "error" in entry, (
            f"torch.optim.{name} now runs under FSDP2: update TORCH_FAILS and the README"
        )
        assert "placement" in entry["error"]
    else:
        assert check(world2, f"fsdp/{name}/torch")["max_diff"] <= TOL


CHECKPOINT_CASES = [
    pytest.param(name, writer, reader, id=f"{name}-{writer}-{reader}")
    for name in NAMES
    for writer, readers in checkpoint_readers(name).items()
    for reader in readers
]


@pytest.mark.parametrize(("name", "writer", "reader"), CHECKPOINT_CASES)
def test_dcp_checkpoint_round_trip(world2, name, writer, reader):
    """The state loaded equals the state saved bit for bit; training continued after the load
    equals uninterrupted training (exactly, when the same class reads it)."""
    record = check(world2, f"checkpoint/{name}/{writer}")[reader]
    assert record["state_equal"]
    if writer == reader:
        assert record["max_diff"] == 0.0
    else:
        assert record["max_diff"] <= TOL
