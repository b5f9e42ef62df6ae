"""The gloo test harness of ``_distributed.py`` itself: ranks, collectives and recorded checks."""

from __future__ import annotations

import pytest
import torch
from _distributed import Checks, check, error_of, requires_gloo, run_scenario, single_process_group

pytestmark = requires_gloo


def _sum_of_ranks() -> float:
    import torch.distributed as dist

    total = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(total)
    return total.item()


def harness_scenario(offset: int) -> dict:
    """Every rank: its rank and world, an all-reduce, a check that raises and one that errs."""
    import torch.distributed as dist

    checks = Checks()
    checks.run("rank", lambda: dist.get_rank() + offset)
    checks.run("world", dist.get_world_size)
    checks.run("sum_of_ranks", _sum_of_ranks)
    checks.run("raises", lambda: 1 / 0)
    checks.run("error_of", error_of, int, "x")
    return checks.results


@pytest.fixture(scope="module")
def ranks(once_per_run):
    return once_per_run(__name__, lambda: run_scenario(harness_scenario, 2, offset=10))


def test_every_rank_runs_the_scenario_with_its_kwargs(ranks):
    assert [check(r, "rank") for r in ranks] == [10, 11]
    assert [check(r, "world") for r in ranks] == [2, 2]


def test_collectives_reach_every_rank(ranks):
    assert [check(r, "sum_of_ranks") for r in ranks] == [3.0, 3.0]


def test_a_raising_check_fails_only_its_test_with_the_remote_traceback(ranks):
    entry = ranks[0]["raises"]
    assert entry["error"] == "ZeroDivisionError: division by zero"
    assert "1 / 0" in entry["traceback"]
    with pytest.raises(pytest.fail.Exception, match="ZeroDivisionError"):
        check(ranks[0], "raises")


def test_error_of_names_the_exception(ranks):
    assert check(ranks[1], "error_of") == "ValueError: invalid literal for int() with base 10: 'x'"
    assert error_of(int, "3") is None


def test_single_process_group_is_a_world_of_one():
    import torch.distributed as dist

    with single_process_group():
        assert (dist.get_rank(), dist.get_world_size()) == (0, 1)
        assert _sum_of_ranks() == 1.0
    assert not dist.is_initialized()
