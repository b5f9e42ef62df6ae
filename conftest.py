"""What every package's test suite shares (pytest loads this file for any test below the checkout)."""

from __future__ import annotations

import fcntl
import json
from collections.abc import Callable
from typing import Any

import pytest


@pytest.fixture(scope="session")
def once_per_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                 ) -> Callable[[str, Callable[[], Any]], Any]:
    """``once_per_run(key, compute)``: ``compute()``'s result (JSON values), computed once per pytest
    run and read back by every pytest-xdist worker that asks for ``key`` after that.

    For the distributed tests' scenarios (10-70 s of rank processes each), which module-scoped
    fixtures run: a fixture is set up once per worker, so every worker that drew one of a module's
    tests would run the module's scenario again. The first worker to ask runs it under a file
    lock; the others wait for it and read its result. A failed ``compute()`` leaves nothing behind,
    so the next worker to ask runs it again and reports its own failure.
    """

    def plain(key: str, compute: Callable[[], Any]) -> Any:
        return json.loads(json.dumps(compute()))  # the same values as a worker reads back

    if not hasattr(request.config, "workerinput"):  # not a pytest-xdist worker
        return plain
    # The workers' temporary directories lie side by side in the run's own one, made fresh each run.
    shared = tmp_path_factory.getbasetemp().parent

    def shared_by_workers(key: str, compute: Callable[[], Any]) -> Any:
        with open(shared / f"{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            done = shared / f"{key}.json"
            if not done.exists():
                done.write_text(json.dumps(compute()))
            return json.loads(done.read_text())

    return shared_by_workers
