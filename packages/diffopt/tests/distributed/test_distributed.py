"""diffopt.distributed with real processes on loopback (TensorPipe), each run under a hard timeout.

``launch`` starts one Python process per rank with torchrun's environment variables, waits for
them with a deadline and kills every one of them if the deadline passes, so a hang fails the
test instead of stalling CI. The scenarios themselves live in ``_scenarios.py``.
"""

from __future__ import annotations

import collections
import copy
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import diffopt
import diffopt.distributed as todist

HERE = Path(__file__).parent
SCENARIOS = HERE / "_scenarios.py"

pytestmark = pytest.mark.skipif(not todist.is_available(),
                                reason="PyTorch built without torch.distributed.rpc")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(scenario: str, world_size: int, result: Path, extra_env: dict | None = None):
    port = free_port()
    procs = []
    for rank in range(world_size):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(world_size), OMP_NUM_THREADS="1", **(extra_env or {}))
        procs.append(subprocess.Popen([sys.executable, str(SCENARIOS), scenario, str(result)],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, start_new_session=True))
    return procs


def finish(procs, deadline_s: float):
    """``(returncode, stdout, stderr)`` per rank; every process is killed at the deadline."""
    end = time.monotonic() + deadline_s
    outputs, hung = [], False
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=max(end - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            hung = True
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        outputs.append((proc.returncode, out, err))
    for proc in procs:  # nothing outlives the test
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if hung:
        pytest.fail("a distributed run passed its deadline:\n" + "\n".join(
            f"--- rank {r} (rc={rc})\n{err[-3000:]}" for r, (rc, _, err) in enumerate(outputs)))
    return outputs


@pytest.fixture(scope="module")
def maml_run(tmp_path_factory, once_per_run):
    def run():
        result = tmp_path_factory.mktemp("maml") / "result.json"
        outputs = finish(start("maml", 3, result), deadline_s=75)
        for rank, (rc, _, err) in enumerate(outputs):
            assert rc == 0, f"rank {rank} exited with {rc}:\n{err[-4000:]}"
        return json.loads(result.read_text())

    # once_per_run (the checkout's conftest.py): one pytest-xdist worker runs it for all of them.
    return once_per_run(__name__, run)


@pytest.mark.parametrize("algo", ["sgd", "adam", "fused_adam"])
def test_distributed_maml_meta_gradient_equals_single_process(maml_run, algo):
    if algo == "fused_adam" and not diffopt.accelerated_op_available("cpu"):
        pytest.skip("fused-optim is not installed")
    run = maml_run[f"maml_{algo}"]
    # float64, same operations in the same order: equal up to the order of the final mean.
    assert run["grad_norm"] > 1e-3
    assert run["grad_diff"] <= 1e-12 * max(run["grad_norm"], 1.0)
    assert run["loss_diff"] <= 1e-12


def test_parallelize_and_backward_accumulate_like_torch(maml_run):
    assert maml_run["parallelize_grad_diff"] <= 1e-12
    # A second backward in the same context adds only its own gradient into .grad.
    assert maml_run["backward_twice_diff"] <= 1e-12


def test_distributed_grad_behaves_like_torch_autograd_grad(maml_run):
    checks = maml_run["autograd"]
    assert checks["vjp"] == [2.0, -40.0, 600.0]
    assert checks["again"] == [2.0, -4.0, 6.0]  # only this call's gradient, not the sum so far
    assert checks["unused"] is None
    assert checks["not_scalar"].startswith("ValueError: distributed backward starts from scalars")
    assert checks["unused_error"].startswith("RuntimeError: inputs[1] was not used")
    assert checks["not_leaf"].startswith("ValueError: inputs[0] must be a leaf tensor")


def test_partitioners_deal_work_as_documented(maml_run):
    assert maml_run["exclusive_ranks"] == [0, 1, 2, 0, 1]  # one task per call, round-robin
    # Balanced contiguous blocks of rows 0..4 over 3 workers: sums 0+1, 2+3, 4.
    assert maml_run["batch_blocks"] == [[0, 2, 1.0], [1, 2, 5.0], [2, 1, 4.0]]
    assert maml_run["async_single_worker"] == 7
    # parallelize() defaults: batch blocks, mean reducer -> mean rank (0+1+2)/3, mean block sum.
    assert maml_run["default_parallelize"] == [1.0, 5.0]


def test_torchopt_rref_patterns_give_the_single_process_meta_gradient(maml_run):
    # float64; only the order of the final means differs from the single process.
    assert maml_run["rref_blocks_grad_diff"] <= 1e-12
    assert maml_run["rref_tasks_grad_diff"] <= 1e-12


def test_calls_dealt_to_one_worker_travel_as_one_message(maml_run):
    calls = maml_run["batched_calls"]  # 7 one-row calls over 3 workers, round-robin
    # One message per other worker; worker 0's own share ran in the calling thread.
    assert maml_run["batched_messages"] == [1, 2]
    assert [rank for rank, *_ in calls] == [0, 1, 2, 0, 1, 2, 0]
    assert [batched for _, batched, _, _ in calls] == [False, True, True] * 2 + [False]
    assert [value for *_, value in calls] == [float(i) for i in range(7)]  # in order
    # Each call saw the module as sent, not as an earlier call of its message left it.
    assert len({seen for _, _, seen, _ in calls}) == 1
    assert calls[0][2] == maml_run["batched_weight_sum"]  # and the caller's module is untouched


def test_the_callers_own_share_receives_what_a_message_delivers(maml_run):
    deliveries = maml_run["own_share"]
    for label in ("context", "no_context", "no_grad"):
        (here_rank, *here), (there_rank, *there) = deliveries[label]
        assert (here_rank, there_rank) == (0, 1)
        assert here == there, label  # grad mode and each argument's kind, as worker 1 saw them
        assert here[0] is True  # functions run with grad enabled, as in an RPC thread
    # In a distributed autograd context, the non-leaf and the leaf arrive attached, the
    # Parameter detached (RPC rebuilds it from its data), the plain tensor plain.
    assert deliveries["context"][0][2] == [["Tensor", True, False, True],
                                           ["Tensor", True, False, True],
                                           ["Parameter", True, True, False],
                                           ["Tensor", False, True, False]]
    assert deliveries["grad_through_both"] == [4.0, 4.0]  # 2 (scale) from each of 2 workers
    # Outside a context, tensors that require grad arrive as detached leaves.
    assert [kind[2:] for kind in deliveries["no_context"][0][2]] == [[True, False]] * 4
    # The calls changed their arguments in place; the caller's tensors did not change.
    assert deliveries["caller_untouched"] == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]


def test_a_module_behind_the_callers_rref_travels_with_the_call(maml_run):
    pushed = maml_run["pushed_module"]
    seen = pushed["seen"]
    # Pickled in the caller's thread to go with the call (so the first to_here() fetched
    # nothing), then by the owner's RPC threads for the two fetches: the second to_here() and
    # worker 2's.
    assert pushed["pickled_in_main_thread"] == [True, False, False]
    assert seen["is_rref"] and seen["owner"] == "worker0" and not seen["is_owner"]
    # Each to_here() is a copy: changing the first changed neither the second nor the owner's.
    assert seen["first"] == pytest.approx(pushed["owner_sum"] + 2.0)
    assert seen["second"] == pytest.approx(pushed["owner_sum"])
    assert seen["sent_on"] == pytest.approx(pushed["owner_sum"])  # worker 2 fetched it
    assert seen["value"] == pytest.approx(pushed["value"] + 3.0)  # first: (w + 1) . (1, 2)
    # Three calls in one message: pickled once, each call its own copy (none saw another's +1).
    three = maml_run["pushed_to_three_calls"]
    assert three["pickled_in_main_thread"] == [True]
    assert three["seen"] == pytest.approx([pushed["owner_sum"] + 2.0] * 3)
    # Sent to the owner itself, the module is the owner's (its 2 weights each got +1).
    assert maml_run["to_the_owner_itself"] == pytest.approx(2.0)
    # A tensor RRef and a module that does not pickle are not pushed and still work.
    assert maml_run["not_pushed"] == [3.0, "worker0"]


def test_a_workers_gradient_is_sent_before_the_callers_own_share_runs_backward(maml_run):
    # torch's engine would run the reply's receiving node last (a low sequence number), after
    # the caller's whole local branch; diffopt puts it first so both backward passes overlap.
    assert maml_run["backward_order"] == ["to worker 1", "own share"]
    assert maml_run["backward_order_grad"] == [16.0, 16.0 * 2**7]


def test_world_information_on_every_worker(maml_run):
    for rank, report in enumerate(maml_run["world"]):
        assert report["rank"] == report["id"] == report["by_name"] == report["local_rank"] == rank
        assert report["world_size"] == report["local_world_size"] == 3
        assert report["name"] == f"worker{rank}"
    assert [r["decorated"] for r in maml_run["world"]] == [
        ["zero", None, None, "!1"], [None, "non-zero", "1|2", None],
        [None, "non-zero", "1|2", "!1"]]
    assert maml_run["world_by_name"] == 2


def test_worker_exception_reaches_the_caller_with_its_traceback(maml_run):
    error = maml_run["worker_error"]
    assert error["type"] == "ValueError"
    message = error["message"]
    assert "task went wrong on purpose (1.0)" in message
    assert "name=worker0" in message  # the first failing call (tasks are dealt from worker 0)
    assert "Traceback" in message and "in deep_inside" in message and "in failing_task" in message
    assert error["notes"] == ["(raised by failing_task on worker 0)"]


def test_stuck_worker_fails_the_call_after_its_timeout(maml_run):
    error = maml_run["timeout_error"]
    assert "sleepy on worker 1 did not finish within 1 s" in error["message"]
    assert 0.9 <= error["seconds"] < 3.5  # the timeout, not the 4 s the worker sleeps
    assert maml_run["after_errors"] == 1  # and RPC keeps working afterwards


def test_lambdas_get_a_clear_error(maml_run):
    assert "module-level function" in maml_run["lambda_error"]


def test_killed_worker_fails_the_caller_which_exits(tmp_path):
    marker, result = tmp_path / "started", tmp_path / "result.json"
    procs = start("kill", 2, tmp_path / "unused.json",
                  {"DIFFOPT_TEST_MARKER": str(marker), "DIFFOPT_TEST_RESULT": str(result)})
    try:
        deadline = time.monotonic() + 45
        while not marker.exists() or not marker.read_text():
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                break
            time.sleep(0.05)
        assert marker.exists(), "the remote call never started"
        worker_pid = int(marker.read_text())
        assert worker_pid == procs[1].pid
        os.kill(worker_pid, signal.SIGKILL)  # mid-call
    finally:
        outputs = finish(procs, deadline_s=40)
    rc, _, err = outputs[0]
    assert rc not in (0, None), err[-3000:]
    assert "RemoteCallError" in err and "started_then_sleep on worker 1 failed" in err
    assert "died or closed its connection" in err
    # The caller gave up well before the 60 s the call would have taken (and its RPC timeout).
    assert json.loads(result.read_text())["seconds"] < 20
    assert outputs[1][0] == -signal.SIGKILL


def test_rank_zero_does_not_wait_forever_for_a_worker_that_left(tmp_path):
    result = tmp_path / "result.json"
    start_time = time.monotonic()
    outputs = finish(start("early_exit", 2, result), deadline_s=45)
    rc, _, err = outputs[0]
    assert json.loads(result.read_text()) == {"work_done": True}
    assert rc not in (0, None)
    assert "worker(s) worker1 died or stopped answering before the end of the run" in err
    assert outputs[1][0] == 0
    assert time.monotonic() - start_time < 40


def test_example_runs_under_torchrun(tmp_path):
    example = HERE.parents[1] / "examples" / "distributed" / "maml_distributed.py"
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc_per_node=2", str(example), "--iterations", "4", "--tasks", "4",
                "--log-every", "2"]
    proc = subprocess.Popen(torchrun, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    ((rc, out, err),) = finish([proc], deadline_s=60)
    assert rc == 0, err[-4000:]
    assert "distributed MAML: 2 worker(s), 4 tasks per outer step" in out
    assert out.count("meta-train loss") == 2 and "meta-test loss after adaptation" in out


def test_example_runs_as_a_world_of_one_without_torchrun(tmp_path):
    example = HERE.parents[1] / "examples" / "distributed" / "maml_distributed.py"
    env = {k: v for k, v in os.environ.items()
           if k not in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                        "LOCAL_WORLD_SIZE")}
    proc = subprocess.Popen([sys.executable, str(example), "--iterations", "2", "--tasks", "3",
                             "--log-every", "1"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    ((rc, out, err),) = finish([proc], deadline_s=40)
    assert rc == 0, err[-4000:]
    assert "distributed MAML: 1 worker(s)" in out and out.count("meta-train loss") == 2


# ---- single-process checks (no RPC needed) ----

def test_partitioner_splits_pytrees_and_broadcasts_the_rest():
    net = torch.nn.Linear(2, 1)
    x, y = torch.arange(10.0).reshape(5, 2), torch.arange(5.0)
    calls = todist.dim_partitioner(0, workers=[3, 1])(net, {"x": x, "y": [y]}, lr=0.1)
    assert [w for w, _, _ in calls] == [3, 1]
    assert calls[0][1][0] is net and calls[1][2] == {"lr": 0.1}
    torch.testing.assert_close(torch.cat([c[1][1]["x"] for c in calls]), x)
    torch.testing.assert_close(torch.cat([c[1][1]["y"][0] for c in calls]), y)
    # Negative dims, exclusive without keepdim selects.
    calls = todist.TensorDimensionPartitioner(-1, exclusive=True, keepdim=False,
                                              workers=[0])(torch.arange(6.0).reshape(2, 3))
    assert [c[1][0].tolist() for c in calls] == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    calls = todist.exclusive_batch_partitioner(torch.zeros(2, 4))
    assert [tuple(c[1][0].shape) for c in calls] == [(1, 4), (1, 4)]
    # No tensor at all: one call with the arguments as given.
    assert todist.dim_partitioner(0, workers=[1])("a", k=2) == [(1, ("a",), {"k": 2})]
    # Picklable (it travels inside parallelized functions).
    import pickle

    clone = pickle.loads(pickle.dumps(todist.dim_partitioner(1, exclusive=True, workers=[0])))
    assert (clone.dim, clone.exclusive, clone.keepdim, clone.workers) == (1, True, True, [0])


def test_partitioner_defaults_give_each_worker_one_contiguous_block():
    tasks = torch.arange(16.0)
    for partitioner in (todist.dim_partitioner(workers=[0, 1, 2]),
                        todist.TensorDimensionPartitioner(0, workers=[0, 1, 2]),
                        todist.dim_partitioner(0, exclusive=False, keepdim=True,
                                               workers=[0, 1, 2])):
        calls = partitioner(tasks)
        assert [worker for worker, _, _ in calls] == [0, 1, 2]  # one call per worker
        assert [c[1][0].tolist() for c in calls] == [tasks[:6].tolist(), tasks[6:11].tolist(),
                                                     tasks[11:].tolist()]
    assert todist.batch_partitioner.exclusive is False and todist.batch_partitioner.keepdim
    # Fewer rows than workers: one row each, the surplus workers get no call.
    assert [w for w, _, _ in todist.dim_partitioner(workers=[0, 1, 2])(torch.zeros(2))] == [0, 1]


def _adapt_in_place(net, x, scale=1.0):
    """Read the module, then change it in place (as torch.optim would): what later calls of the
    same message must not see."""
    seen = (net[0].weight.detach().clone(), net[0].weight is net[1].weight,
            isinstance(net[0].weight, torch.nn.Parameter))
    with torch.no_grad():
        net[0].weight.add_(100.0)
    return seen, float(x.sum()) * scale


def test_batched_calls_run_in_order_each_on_its_own_arguments():
    from diffopt.distributed.api import _by_worker, _pack_calls, _run_calls

    calls = [(0, ("a",), {}), (1, ("b",), {}), (0, ("c",), {}), (2, ("d",), {}), (1, ("e",), {})]
    assert _by_worker(calls) == {0: [0, 2], 1: [1, 4], 2: [3]}

    tied = torch.nn.Linear(3, 3, bias=False)
    net = torch.nn.Sequential(tied, tied)  # one weight used twice: it must stay one weight
    original = tied.weight.detach().clone()
    received = copy.deepcopy(net)  # stands for what the message delivered to the worker
    xs = torch.arange(3.0).reshape(3, 1)
    blobs, aside, pushed = _pack_calls([((received, xs[i]), {"scale": 10.0 ** i})
                                        for i in range(3)], push=True)
    assert sum(isinstance(obj, torch.nn.Parameter) for obj in aside) == 1  # sent once
    assert pushed == {}  # no RRef among the arguments
    results = _run_calls(_adapt_in_place, pushed, blobs, aside)
    assert [value for _, value in results] == [0.0, 10.0, 200.0]  # in order, own kwargs
    for (weight, still_tied, is_parameter), _ in results:
        torch.testing.assert_close(weight, original)  # no call saw another's change
        assert still_tied and is_parameter
    # Something only RPC's own pickler can send: no batching (the calls then go one by one).
    assert _pack_calls([((lambda: 1,), {}), ((lambda: 2,), {})]) is None


class _TaggedDict(collections.OrderedDict):
    """An OrderedDict subclass: pickled its own way, not as a plain OrderedDict."""


def test_batched_pickles_rebuild_ordered_dicts_and_resolve_only_in_diffopt():
    import pickle

    from diffopt.distributed.api import _ArgumentsUnpickler, _pack_calls

    w = torch.ones(2)
    plain = collections.OrderedDict([("b", w), ("a", [1, w])])
    plain.note = "kept"  # an OrderedDict's own attributes travel too
    tagged = _TaggedDict(z=0)
    blobs, aside, _ = _pack_calls([((plain, tagged), {})])
    assert len(aside) == 1  # w, once
    (got, got_tagged), _ = _ArgumentsUnpickler(blobs[0], aside, lambda _, t: t).load()
    assert type(got) is collections.OrderedDict and list(got) == ["b", "a"]
    assert got["b"] is w and got["a"][1] is w and got.note == "kept"
    assert type(got_tagged) is _TaggedDict and got_tagged == {"z": 0}
    with pytest.raises(RuntimeError, match=r"outside diffopt\.distributed"):
        pickle.loads(blobs[0])  # a plain unpickler cannot resolve what was set aside


def test_batched_calls_keep_tensors_attached_to_the_callers_graph():
    from diffopt.distributed.api import _pack_calls, _run_calls

    w = torch.tensor([1.0, 2.0], requires_grad=True)
    shared = w * 3  # a non-leaf: what RPC delivers inside a distributed autograd context
    blobs, aside, _ = _pack_calls([((shared, float(i)), {}) for i in range(3)])
    outs = _run_calls(torch.mul, {}, blobs, aside)
    (grad,) = torch.autograd.grad(sum(o.sum() for o in outs), w)
    torch.testing.assert_close(grad, torch.tensor([9.0, 9.0]))  # 3 * (0 + 1 + 2)
    leaf = torch.ones(2, requires_grad=True)
    blobs, aside, _ = _pack_calls([((leaf,), {}), ((leaf,), {})])
    first, second = _run_calls(lambda t: t, {}, blobs, aside)
    assert first is leaf and second is not leaf and second.is_leaf and second.requires_grad


def test_partitioner_rejects_bad_input():
    with pytest.raises(ValueError, match="needs exclusive=True"):
        todist.dim_partitioner(0, keepdim=False)
    with pytest.raises(ValueError, match="disagree"):
        todist.dim_partitioner(0, workers=[0])(torch.zeros(3), torch.zeros(4))
    with pytest.raises(ValueError, match="cannot split a tensor of shape"):
        todist.dim_partitioner(0, workers=[0])(torch.zeros(3), torch.tensor(1.0))
    with pytest.raises(ValueError, match="size 0"):
        todist.dim_partitioner(0, workers=[0])(torch.zeros(0, 2))
    with pytest.raises(ValueError, match="must not be empty"):
        todist.dim_partitioner(0, workers=[])
    with pytest.raises(TypeError, match="dim must be an int"):
        todist.dim_partitioner(0.5)


def test_reducers_are_differentiable_and_check_structure():
    a = torch.tensor([1.0, 2.0], requires_grad=True)
    results = [(a * 2, a.sum()), (a * 4, a.sum() * 3)]
    mean, total = todist.mean_reducer(results), todist.sum_reducer(results)
    torch.testing.assert_close(mean[0], torch.tensor([3.0, 6.0]))
    torch.testing.assert_close(total[1], torch.tensor(12.0))
    (grad,) = torch.autograd.grad(mean[0].sum() + total[1], a)
    torch.testing.assert_close(grad, torch.tensor([3.0 + 4.0, 3.0 + 4.0]))
    with pytest.raises(ValueError, match="no results"):
        todist.mean_reducer([])
    with pytest.raises(ValueError, match="structure"):
        todist.sum_reducer([(a,), (a, a)])
    with pytest.raises(ValueError, match="different shapes"):
        todist.sum_reducer([a, a[:1]])


def test_calls_without_rpc_explain_how_to_start_it(monkeypatch):
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert todist.get_world_info() == (0, 1, 0, 1)
    assert todist.get_rank() == todist.get_world_rank() == 0
    with pytest.raises(RuntimeError, match="auto_init_rpc"):
        todist.remote_sync_call(len, args=([1],), partitioner=0)
    with pytest.raises(RuntimeError, match="auto_init_rpc"):
        todist.barrier()
    with pytest.raises(ValueError, match="outside the world"):
        todist.get_worker_id(3)
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="inconsistent RANK"):
        todist.get_world_info()
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(ValueError, match="must be an integer"):
        todist.get_world_info()
    with pytest.raises(TypeError, match="@auto_init_rpc\\(\\)"):
        todist.auto_init_rpc(42)


def test_parallelize_refuses_functions_rpc_cannot_send():
    def local(x):
        return x

    with pytest.raises(TypeError, match="module-level function"):
        todist.parallelize()(local)


def test_torchopt_names_are_exported():
    import diffopt as torchopt

    for name in ("is_available", "auto_init_rpc", "get_world_info", "get_world_rank", "get_rank",
                 "get_world_size", "get_local_rank", "get_local_world_size", "get_worker_id",
                 "barrier", "on_rank", "not_on_rank", "rank_zero_only", "rank_non_zero_only",
                 "TensorDimensionPartitioner", "dim_partitioner", "batch_partitioner",
                 "mean_reducer", "sum_reducer", "remote_async_call", "remote_sync_call",
                 "parallelize", "parallelize_async", "parallelize_sync", "rpc", "autograd"):
        assert hasattr(torchopt.distributed, name), name
    for name in ("is_available", "context", "backward", "grad", "get_gradients",
                 "DistAutogradContext"):
        assert hasattr(torchopt.distributed.autograd, name), name
    assert torchopt.distributed.rpc is torch.distributed.rpc
