#!/usr/bin/env python3
"""Run a peer's own examples natively and through the import alias, and compare what they print.

    python ci/compat/examples.py PEER_CHECKOUT [--tag v0.7.3] [--seconds 240] [--only NAME ...]

PEER_CHECKOUT is a clone of metaopt/torchopt (a work tree or a bare git directory); its
``examples/`` at the tag are exported to a temporary folder, never into this repository. Each
example runs unchanged, as ``python SCRIPT ARGS`` in a fresh working folder, twice: ``native``
(``import torchopt`` is TorchOpt; only when it is installed) and ``alias`` (``import torchopt``
resolves to ``diffopt``, by ``alias_plugin``'s finder). Datasets the examples would download are
replaced by generated data of the same shapes: the stand-ins in ``ci/compat/standins/<name>/``
(Omniglot's ``helpers/omniglot_loaders.py``, ``torchvision.datasets.MNIST``) come first on
``sys.path``. On a machine without CUDA, ``.cuda()`` keeps tensors and modules on the CPU.
Python's, NumPy's and torch's generators are seeded before the example starts.

Both modes of an example run at the same time, so that they share the machine's load alike; a
run stops when the example ends or after ``--seconds``. Runs are seeded, so the two modes print
the same numbers up to where the shorter run stopped. The comparison takes every decimal number
printed on a line that does not report a time, in order, over that common prefix, to a relative
tolerance of 1e-4 (the examples round their losses themselves when they print them). An example
whose dependencies are missing is reported as not runnable, with the reason. Results are written
to ``out/compat/torchopt-examples.json`` and summarized as a Markdown table.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import types
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))
from run import export_tree  # noqa: E402  (ci/compat/run.py: the peer's files at the tag)


@dataclass(frozen=True)
class Example:
    name: str
    script: str  # relative to examples/
    args: tuple[str, ...] = ()
    standins: tuple[str, ...] = ()  # folders under ci/compat/standins/, first on sys.path
    requires: tuple[str, ...] = ()  # modules the example imports beyond torch and torchopt
    world_size: int = 1  # >1: that many RPC workers, started as torchrun would
    graph: bool = False  # compare the names in the rendered graph instead of printed numbers


PLOTS = ("matplotlib", "pandas")
# Two tasks per meta-batch instead of 32 (the episodes keep their shapes), so that a run on a
# small CPU box gets through an evaluation and several training steps within --seconds.
FEW_TASKS = ("--task_num", "2")
EXAMPLES = (
    Example("few-shot MAML", "few-shot/maml_omniglot.py", FEW_TASKS, ("omniglot",), PLOTS),
    Example("iMAML", "iMAML/imaml_omniglot.py", FEW_TASKS, ("omniglot",), PLOTS),
    Example("iMAML (functional)", "iMAML/imaml_omniglot_functional.py", FEW_TASKS, ("omniglot",),
            PLOTS),
    Example("L2R", "L2R/l2r.py", standins=("mnist",),
            requires=("matplotlib", "seaborn", "tensorboard")),
    Example("MGRL", "MGRL/mgrl.py"),
    Example("LOLA", "LOLA/lola_dice.py"),
    Example("MAML-RL", "MAML-RL/maml.py", requires=("gym",)),
    Example("MAML-RL (functional)", "MAML-RL/func_maml.py", requires=("gym",)),
    Example("MAML-RL (TorchRL)", "MAML-RL/maml_torchrl.py", requires=("torchrl", "tensordict")),
    Example("distributed few-shot (RPC)", "distributed/few-shot/maml_omniglot.py", FEW_TASKS,
            ("omniglot",), (*PLOTS, "setproctitle"), world_size=2),
    # Its workers index the meta-batch by task id up to the default 32: it keeps --task_num.
    Example("distributed few-shot (RPC, local loader)",
            "distributed/few-shot/maml_omniglot_local_loader.py", (), ("omniglot",),
            (*PLOTS, "setproctitle"), world_size=2),
    Example("FuncTorch MAML (vmap)", "FuncTorch/maml_omniglot_vmap.py",
            (*FEW_TASKS, "--device", "cpu"), ("omniglot",), PLOTS),
    Example("FuncTorch parallel training", "FuncTorch/parallel_train_torchopt.py"),
    Example("visualize", "visualize.py", requires=("torchviz", "graphviz"), graph=True),
)

NUMBER = re.compile(r"-?\d+\.\d+(?:[eE][-+]?\d+)?")
TIMING = re.compile(r"time|elapsed|sec\b|\d+s\b|it/s|s/it", re.IGNORECASE)
LOSS_LINE = re.compile(r"loss|gamma|reward|return", re.IGNORECASE)
LOSS_VALUE = re.compile(r"loss\W*(-?\d+\.\d+)", re.IGNORECASE)
# The tensor names visualize.py gives (anywhere in a label: TorchOpt puts them after the op name)
GRAPH_NAME = re.compile(r"(?<![\w.])((?:step\d+\.|meta_param)[\w.]*)")


# ---------------------------------------------------------------------------------------------
# The child: runs one example in this process (with the alias installed when asked).


def _keep_on_cpu() -> None:
    """Make ``.cuda()`` a no-op on a machine without CUDA, for tensors and modules alike."""
    import torch

    if torch.cuda.is_available():
        return
    torch.Tensor.cuda = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
    torch.nn.Module.cuda = lambda self, *args, **kwargs: self  # type: ignore[method-assign]


def _seed_everything(seed: int = 0) -> None:
    """Seed Python's, NumPy's and torch's generators: some examples never seed them (LOLA parses
    ``--seed`` and leaves it unused), and unseeded runs cannot be compared. An example that seeds
    itself simply overrides this."""
    import random

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def child(script: Path, args: list[str], mode: str, standins: list[str]) -> None:
    if mode == "alias":
        os.environ["COMPAT_ALIAS"] = "torchopt:diffopt"
        import alias_plugin  # noqa: F401  (installs the finder on import)
    _keep_on_cpu()
    _seed_everything()
    sys.path[:0] = [str(HERE / "standins" / name) for name in standins] + [str(script.parent)]
    sys.argv = [str(script), *args]
    # The script becomes the process's __main__ module for good, as under ``python SCRIPT``:
    # RPC workers look functions up by name in sys.modules['__main__'] (runpy only lends it).
    main = types.ModuleType("__main__")
    main.__file__ = str(script)
    sys.modules["__main__"] = main
    exec(compile(script.read_text(), str(script), "exec"), main.__dict__)


# ---------------------------------------------------------------------------------------------
# The parent: runs each example in both modes and compares.


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_modes(example: Example, examples: Path, modes: list[str], seconds: float,
              workdirs: dict[str, Path]) -> dict[str, dict]:
    """Run one example in every mode at once (so they share the machine's load alike) and
    return, per mode, its printed numbers, graph names and status."""
    script = examples / example.script
    base_env = dict(os.environ, PYTHONUNBUFFERED="1", MPLBACKEND="Agg")
    procs: dict[str, list] = {}
    for mode in modes:
        cmd = [sys.executable, "-u", str(Path(__file__).resolve()), "--child", str(script),
               "--mode", mode, *[f"--standin={s}" for s in example.standins], "--",
               *example.args]
        port = _free_port()
        procs[mode] = []
        for rank in range(example.world_size):
            env = dict(base_env)
            if example.world_size > 1:
                env.update(RANK=str(rank), LOCAL_RANK=str(rank),
                           WORLD_SIZE=str(example.world_size),
                           LOCAL_WORLD_SIZE=str(example.world_size), MASTER_ADDR="127.0.0.1",
                           MASTER_PORT=str(port))
            log = open(workdirs[mode] / f"{mode}-{rank}.log", "w")  # noqa: SIM115 (closed below)
            procs[mode].append((subprocess.Popen(cmd, cwd=workdirs[mode], env=env, stdout=log,
                                                 stderr=subprocess.STDOUT), log))
    start = time.monotonic()
    results = {}
    for mode in modes:
        timed_out = False
        for proc, log in procs[mode]:
            try:
                proc.wait(timeout=max(seconds - (time.monotonic() - start), 1))
            except subprocess.TimeoutExpired:
                timed_out = True
                proc.kill()
                proc.wait()
            log.close()
        output = (workdirs[mode] / f"{mode}-0.log").read_text(errors="replace")
        numbers = printed_numbers(output)
        graph = sorted({name for gv in workdirs[mode].glob("torchopt_graph*")
                        if gv.suffix != ".svg"
                        for name in GRAPH_NAME.findall(gv.read_text(errors="replace"))})
        failed = procs[mode][0][0].returncode not in (0, None) and not timed_out
        results[mode] = {"numbers": numbers, "graph": graph, "timed_out": timed_out,
                         "failed": failed, "seconds": round(time.monotonic() - start, 1),
                         "tail": "\n".join(output.strip().splitlines()[-6:])}
    return results


def printed_numbers(output: str) -> list[tuple[float, bool]]:
    r"""``(value, is_loss)`` for every decimal number printed outside timing lines; ``is_loss``
    marks the number that follows the word "loss", or every number of a line that reports a
    gamma, reward or return and has no "loss".

    >>> printed_numbers("[Epoch 1.00] Test Loss: 0.31 | Acc: 99.67\nTime: 2.5")
    [(1.0, False), (0.31, True), (99.67, False)]
    """
    numbers = []
    for line in output.splitlines():
        if TIMING.search(line):
            continue
        after_loss = {m.start(1) for m in LOSS_VALUE.finditer(line)}
        whole_line = not after_loss and bool(LOSS_LINE.search(line))
        numbers += [(float(m.group()), whole_line or m.start() in after_loss)
                    for m in NUMBER.finditer(line)]
    return numbers


def _close(a: float, b: float) -> bool:
    return a == b or math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-6) or (
        math.isnan(a) and math.isnan(b))


def compare(example: Example, native: dict | None, alias: dict) -> dict:
    if native is not None and native["failed"] and alias["failed"]:
        last = native["tail"].splitlines()[-1:] or [""]
        return {"status": "fails natively too", "detail": last[0]}
    if alias["failed"]:
        return {"status": "alias fails", "detail": alias["tail"]}
    if native is None:
        return {"status": "alias runs (TorchOpt not installed: not compared)", "detail": ""}
    if native["failed"]:
        return {"status": "native fails", "detail": native["tail"]}
    if example.graph:
        missing = sorted(set(native["graph"]) - set(alias["graph"]))
        extra = sorted(set(alias["graph"]) - set(native["graph"]))
        if missing or not native["graph"]:
            return {"status": "graph names differ",
                    "detail": f"native {native['graph']} alias {alias['graph']}"}
        detail = f"{len(native['graph'])} names"
        if extra:
            detail += f"; diffopt also shows {extra}, which TorchOpt draws unnamed"
        return {"status": "same graph names", "detail": detail}
    common = min(len(native["numbers"]), len(alias["numbers"]))
    if common == 0:
        return {"status": "nothing printed in time", "detail": alias["tail"]}
    for index in range(common):
        (a, _), (b, _) = native["numbers"][index], alias["numbers"][index]
        if not _close(a, b):
            return {"status": "numbers differ",
                    "detail": f"number {index}: native {a} alias {b} (of {common} compared)"}
    return {"status": "same numbers", "detail": f"{common} printed numbers compared"}


def _last_loss(result: dict | None, upto: int) -> str:
    """The last loss-like number among the first ``upto`` printed (the compared prefix)."""
    if result is None:
        return "-"
    numbers = result["numbers"][:upto]
    values = [value for value, is_loss in numbers if is_loss] or [value for value, _ in numbers]
    return f"{values[-1]:.6g}" if values else "-"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkout", type=Path)
    parser.add_argument("--tag", default="v0.7.3")
    parser.add_argument("--seconds", type=float, default=240.0,
                        help="wall-clock limit of one run of one example (default 240)")
    parser.add_argument("--only", nargs="*", help="names (or script paths) of examples to run")
    if sys.argv[1:2] == ["--child"]:  # --child SCRIPT --mode MODE [--standin=NAME...] -- ARGS
        split = sys.argv.index("--")
        options, example_args = sys.argv[3:split], sys.argv[split + 1:]
        standins = [o.split("=", 1)[1] for o in options if o.startswith("--standin=")]
        child(Path(sys.argv[2]), example_args, options[1], standins)
        return 0
    args = parser.parse_args()
    selected = [e for e in EXAMPLES
                if not args.only or e.name in args.only or e.script in args.only]
    have_native = importlib.util.find_spec("torchopt") is not None
    rows = []
    with tempfile.TemporaryDirectory(prefix="compat-examples-") as tmp:
        examples = export_tree(args.checkout.resolve(), args.tag, Path(tmp), "examples")
        for example in selected:
            missing = [m for m in example.requires if importlib.util.find_spec(m) is None]
            if missing:
                rows.append({"example": example.name, "script": example.script,
                             "status": "not runnable here",
                             "detail": f"missing modules: {', '.join(missing)}"})
                print(f"[examples] {example.name}: not runnable ({missing})", file=sys.stderr)
                continue
            modes = (["native"] if have_native else []) + ["alias"]
            workdirs = {mode: Path(tmp) / "runs" / example.script.replace("/", "_") / mode
                        for mode in modes}
            for workdir in workdirs.values():
                workdir.mkdir(parents=True)
            results = run_modes(example, examples, modes, args.seconds, workdirs)
            for mode, result in results.items():
                print(f"[examples] {example.name} ({mode}): {result['seconds']} s, "
                      f"{len(result['numbers'])} numbers", file=sys.stderr, flush=True)
            verdict = compare(example, results.get("native"), results["alias"])
            common = min(len(r["numbers"]) for r in results.values())
            rows.append({"example": example.name, "script": example.script, **verdict,
                         "native_loss": _last_loss(results.get("native"), common),
                         "alias_loss": _last_loss(results["alias"], common),
                         "runs": {m: {k: r[k] for k in ("seconds", "timed_out", "failed",
                                                        "numbers", "graph")}
                                  for m, r in results.items()}})
            print(f"[examples] {example.name}: {verdict['status']} {verdict['detail']}",
                  file=sys.stderr, flush=True)
    out = ROOT / "out" / "compat" / "torchopt-examples.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))
    print("\n| example | native loss | alias loss | status |\n|---|---|---|---|")
    for row in rows:
        detail = f" ({row['detail']})" if row.get("detail") and "\n" not in row["detail"] else ""
        print(f"| {row['example']} | {row.get('native_loss', '-')} | "
              f"{row.get('alias_loss', '-')} | {row['status']}{detail} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
