"""Runs a test scenario on N gloo CPU processes on loopback and brings its results back to pytest.

Spawning ranks costs seconds, so a test module runs ONE scenario that makes many checks (in a
module-scoped fixture) and its tests assert on the results. The API, kept stable for the modules
that build on it:

``GLOO_MISSING``
    ``None`` where torch.distributed with gloo is usable, else the reason it is not.
``requires_gloo``
    A pytest mark that skips with that reason (``pytestmark = requires_gloo`` for a module).
``run_scenario(fn, world_size=2, *, deadline_s=120.0, **kwargs) -> list``
    Runs ``fn(**kwargs)`` in ``world_size`` fresh processes, one per rank, each with the default
    gloo process group initialized (``dist.get_rank()``, ``dist.get_world_size()``), one OpenMP
    thread and ``torch.set_num_threads(1)``. ``fn`` is a module-level function of a module in this
    tests directory (each rank imports that module from its file, so keep its import side-effect
    free); ``kwargs`` and the return values travel as JSON. Returns each rank's return value,
    indexed by rank. A rank that raises fails the test with its traceback; at the deadline every
    rank is killed and the test fails (a hang never stalls CI).
``Checks``
    Inside a scenario: ``checks.run(name, fn, *args, **kwargs)`` records ``fn``'s JSON-able return
    value, or the exception it raised with its traceback, under ``name``; the scenario returns
    ``checks.results``. One failing check then fails only the tests that read it.
``check(results, name)``
    In a test: the value recorded under ``name``, or ``pytest.fail`` with the remote traceback.
``error_of(fn, *args, **kwargs) -> str | None``
    ``"ExceptionType: message"`` of what ``fn`` raised, or ``None``: for error-case checks.
``single_process_group()``
    A context manager with a world of 1 in THIS process (gloo over an in-memory store), for cheap
    single-rank checks such as argument errors; it restores the previous state on exit.

Run as a script (``python _distributed.py MODULE_FILE FUNCTION OUT_DIR KWARGS_JSON``) it is one
rank; ``run_scenario`` starts it that way with torchrun's environment variables.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

HERE = Path(__file__).resolve().parent

# gloo's C++ occasionally aborts a rank ("terminate called without an active exception", no Python
# traceback) on a loaded 2-core CI box (diffopt's distributed tests met it too). Such a run says
# nothing about the code under test, so it is retried once; a second abort fails the test.
GLOO_ABORT = "terminate called without an active exception"


def _gloo_missing() -> str | None:
    import torch.distributed as dist

    if not dist.is_available():
        return "PyTorch built without torch.distributed"
    if not dist.is_gloo_available():
        return "PyTorch built without the gloo backend"
    return None


GLOO_MISSING = _gloo_missing()
requires_gloo = pytest.mark.skipif(GLOO_MISSING is not None, reason=GLOO_MISSING or "")


class Checks:
    """Named results of the checks a scenario makes, each a value or the error it raised."""

    def __init__(self) -> None:
        self.results: dict[str, dict[str, Any]] = {}

    def run(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call ``fn(*args, **kwargs)`` and record its value (or its exception) under ``name``.

        Args:
            name: The key a test reads with ``check``; unique within the scenario.
            fn: The check; returns something JSON can encode.
            *args: Positional arguments for ``fn``.
            **kwargs: Keyword arguments for ``fn``.

        Returns:
            ``fn``'s value, or ``None`` where it raised.
        """
        if name in self.results:
            raise KeyError(f"check {name!r} recorded twice")
        try:
            value = fn(*args, **kwargs)
        except Exception as exc:  # recorded for the test that reads it, never swallowed silently
            self.results[name] = {
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(),
            }
            return None
        self.results[name] = {"value": value}
        return value


def check(results: dict[str, Any], name: str) -> Any:
    """The value a scenario's ``Checks`` recorded under ``name``; fails the test if it raised.

    Args:
        results: One rank's ``checks.results``, as ``run_scenario`` returned it.
        name: The check's name.

    Returns:
        The check's value.
    """
    if name not in results:
        pytest.fail(f"the scenario recorded no check {name!r} (it has {sorted(results)})")
    entry = results[name]
    if "error" in entry:
        pytest.fail(f"check {name!r} raised on the rank:\n{entry['traceback']}")
    return entry["value"]


def error_of(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> str | None:
    """``"ExceptionType: message"`` of what ``fn(*args, **kwargs)`` raises, or ``None``.

    Args:
        fn: The call expected to fail.
        *args: Positional arguments for ``fn``.
        **kwargs: Keyword arguments for ``fn``.

    Returns:
        The exception's type name and message, or ``None`` where ``fn`` returned.
    """
    try:
        fn(*args, **kwargs)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


@contextlib.contextmanager
def single_process_group() -> Iterator[None]:
    """A gloo world of 1 in this process, for cheap single-rank checks; torn down on exit.

    Yields:
        Nothing; ``torch.distributed`` is initialized (rank 0 of 1) inside the block.
    """
    import torch.distributed as dist

    if GLOO_MISSING is not None:
        pytest.skip(GLOO_MISSING)
    if dist.is_initialized():
        raise RuntimeError("single_process_group: a default process group already exists")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start(
    fn: Callable[..., Any], world_size: int, out_dir: Path, kwargs: dict[str, Any]
) -> list[subprocess.Popen[str]]:
    module_file = Path(sys.modules[fn.__module__].__file__ or "").resolve()
    env = dict(
        os.environ,
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(_free_port()),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(world_size),
        OMP_NUM_THREADS="1",
    )
    if Path("/sys/class/net/lo").exists():  # gloo's own connections stay on loopback too
        env["GLOO_SOCKET_IFNAME"] = "lo"
    argv = [
        sys.executable,
        str(HERE / "_distributed.py"),
        str(module_file),
        fn.__name__,
        str(out_dir),
        json.dumps(kwargs),
    ]
    return [
        subprocess.Popen(
            argv,
            env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for rank in range(world_size)
    ]


def _finish(
    procs: list[subprocess.Popen[str]], deadline_s: float
) -> tuple[list[tuple[int, str]], bool]:
    """Each rank's ``(returncode, stdout + stderr)``, and whether the deadline passed."""
    end = time.monotonic() + deadline_s
    outputs, hung = [], False
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=max(end - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            hung = True
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        outputs.append((proc.returncode, out + err))
    for proc in procs:  # nothing outlives the test
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return outputs, hung


def _logs(outputs: list[tuple[int, str]]) -> str:
    return "\n".join(
        f"--- rank {rank} (exit {rc})\n{log[-4000:]}" for rank, (rc, log) in enumerate(outputs)
    )


def run_scenario(
    fn: Callable[..., Any], world_size: int = 2, *, deadline_s: float = 120.0, **kwargs: Any
) -> list[Any]:
    """Run ``fn(**kwargs)`` on ``world_size`` gloo processes on loopback; each rank's return value.

    Args:
        fn: A module-level function of a test module in this directory.
        world_size: The number of ranks (processes).
        deadline_s: Every rank is killed and the test fails when the run takes longer.
        **kwargs: JSON-able keyword arguments for ``fn``.

    Returns:
        The ranks' return values (after a JSON round trip), indexed by rank.
    """
    if GLOO_MISSING is not None:
        pytest.skip(GLOO_MISSING)
    import tempfile

    for attempt in range(2):
        with tempfile.TemporaryDirectory(prefix="fused_optim_dist_") as tmp:
            out_dir = Path(tmp)
            outputs, hung = _finish(_start(fn, world_size, out_dir, kwargs), deadline_s)
            files = [out_dir / f"rank{rank}.json" for rank in range(world_size)]
            results = [json.loads(f.read_text()) if f.exists() else None for f in files]
        if hung:
            pytest.fail(
                f"the {fn.__name__} scenario passed its {deadline_s:.0f} s deadline:\n{_logs(outputs)}"
            )
        for rank, result in enumerate(results):
            if result is not None and "traceback" in result:
                pytest.fail(
                    f"rank {rank} of the {fn.__name__} scenario raised:\n{result['traceback']}"
                )
        aborted = any(rc != 0 and GLOO_ABORT in log for rc, log in outputs)
        if all(result is not None for result in results) and (
            aborted or all(rc == 0 for rc, _ in outputs)
        ):
            # Every rank wrote its result; an abort in gloo's teardown after that changes nothing.
            return [result["value"] for result in results if result is not None]
        if not (aborted and attempt == 0):
            break
    pytest.fail(f"the {fn.__name__} scenario failed:\n{_logs(outputs)}")


def _rank_main(module_file: str, function: str, out_dir: str, kwargs_json: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    sys.path.insert(0, str(Path(module_file).parent))
    rank = int(os.environ["RANK"])
    out = Path(out_dir) / f"rank{rank}.json"
    dist.init_process_group("gloo")
    try:
        spec = importlib.util.spec_from_file_location(Path(module_file).stem, module_file)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        result: dict[str, Any] = {"value": getattr(module, function)(**json.loads(kwargs_json))}
    except BaseException:
        result = {"traceback": traceback.format_exc()}
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(out)  # atomically: a file that exists is complete
    dist.destroy_process_group()


if __name__ == "__main__":
    _rank_main(*sys.argv[1:5])
