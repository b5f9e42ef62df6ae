#!/usr/bin/env python3
"""Run a peer's own test suite natively and through an import alias, and compare per function.

    python ci/compat/run.py optree   PEER_CHECKOUT [--tag v0.20.0] [-- PYTEST_ARGS...]
    python ci/compat/run.py torchopt PEER_CHECKOUT [--tag v0.7.3]  [-- PYTEST_ARGS...]

PEER_CHECKOUT is a clone of the peer's repository (a work tree, or a bare git directory such as
the one ``fetch`` leaves); its ``tests/`` at the released tag are exported to a temporary folder,
never into this repository. The suite runs up to three times, each in its own pytest process:
``native`` (only when the peer itself is importable, e.g. in ``nox -s compat``'s virtualenv),
``alias`` (``import optree`` resolves to ``optree_core``, ``import torchopt`` to ``diffopt``) and
``alias-lenient`` (the same, with ``pytest.raises(match=...)`` patterns dropped so a failure
that differs only in an error message's words counts as a pass).

A test *function* passes when none of its parametrized cases fails and at least one passes; a
module that fails to import fails all of its functions. The summary says how many of the
functions that pass natively also pass through the alias, and lists the ones that do not.
Outcomes are written to ``out/compat/<peer>-<mode>.json``; where the peer is not installed, a
native run saved there earlier is the reference.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PEERS = {  # peer import name -> (our package, released tag we claim to replace)
    "optree": ("optree_core", "v0.20.0"),
    "torchopt": ("diffopt", "v0.7.3"),
}


def export_tree(checkout: Path, tag: str, dest: Path, folder: str = "tests") -> Path:
    """Copy ``folder`` of ``tag`` (or of the work tree when it is not a git repository) to dest."""
    git_dir = checkout / ".git" if (checkout / ".git").exists() else checkout
    probe = subprocess.run(["git", "--git-dir", str(git_dir), "rev-parse", "--verify", tag],
                           capture_output=True, text=True)
    if probe.returncode == 0:
        archive = subprocess.run(["git", "--git-dir", str(git_dir), "archive", tag, folder],
                                 capture_output=True, check=True).stdout
        with tarfile.open(fileobj=BytesIO(archive)) as tar:
            tar.extractall(dest, filter="data")
    elif (checkout / folder).is_dir():
        subprocess.run(["cp", "-r", str(checkout / folder), str(dest)], check=True)
    else:
        raise SystemExit(f"{checkout} has neither tag {tag!r} nor a {folder}/ folder")
    return dest / folder


def export_tests(checkout: Path, tag: str, dest: Path) -> Path:
    """Copy ``tests/`` of ``tag`` to dest, with an empty pytest.ini beside it."""
    tests = export_tree(checkout, tag, dest, "tests")
    (dest / "pytest.ini").write_text("[pytest]\n")  # keep this repository's settings out
    return tests


@contextlib.contextmanager
def alias_in_subprocesses():
    """Let interpreters that a peer's test starts see the alias too.

    optree's tests run ``import optree`` in fresh interpreters whose environment keeps
    ``COMPAT_ALIAS`` but drops ``PYTHONPATH``; a ``.pth`` file in this interpreter's
    site-packages (removed afterwards) installs the alias there, and only where that variable is
    set, so the interpreter is unchanged for everything else.
    """
    site = Path(sysconfig.get_paths()["purelib"])
    pth = site / "_diffopt_compat_alias.pth"
    here = str(Path(__file__).parent)
    pth.write_text(f"import os, sys; os.environ.get('COMPAT_ALIAS') and (sys.path.append({here!r}) "
                   f"or __import__('compat_alias').install_alias())\n")
    try:
        yield
    finally:
        pth.unlink(missing_ok=True)


def run_suite(tests: Path, mode: str, alias: str | None, pytest_args: list[str],
              out: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), env.get("PYTHONPATH", "")])
    env.pop("COMPAT_ALIAS", None)
    env.pop("COMPAT_FORGIVE_WORDING", None)
    if alias:
        env["COMPAT_ALIAS"] = alias
    if mode == "alias-lenient":
        env["COMPAT_FORGIVE_WORDING"] = "1"
    env["COMPAT_OUTCOMES"] = str(out)
    cmd = [sys.executable, "-m", "pytest", str(tests), "-p", "alias_plugin", "-p",
           "no:cacheprovider", "-q", "--no-header", "-rN", "--tb=no",
           "--continue-on-collection-errors", "--rootdir", str(tests.parent), "-c",
           str(tests.parent / "pytest.ini"), *pytest_args]
    print(f"[compat] {mode}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, env=env, cwd=tests.parent, capture_output=True, text=True)
    tail = proc.stdout.strip().splitlines()[-1:] or ["(no output)"]
    print(f"[compat] {mode}: {tail[0]}", file=sys.stderr)
    if not out.exists():
        raise SystemExit(f"{mode} run wrote no outcomes:\n{proc.stdout[-4000:]}{proc.stderr[-4000:]}")
    return json.loads(out.read_text())


def by_function(outcomes: dict[str, str]) -> dict[str, str]:
    """Fold parametrized cases into their test function; collection errors fail a module."""
    functions: dict[str, list[str]] = {}
    for nodeid, outcome in outcomes.items():
        functions.setdefault(re.sub(r"\[.*\]$", "", nodeid), []).append(outcome)
    return {
        name: "failed" if "failed" in seen else "passed" if "passed" in seen else "skipped"
        for name, seen in functions.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("peer", choices=sorted(PEERS))
    parser.add_argument("checkout", type=Path)
    parser.add_argument("--tag")
    parser.add_argument("--skip-native", action="store_true")
    parser.add_argument("--strict-only", action="store_true",
                        help="skip the alias-lenient run (when wording does not count, e.g. TorchOpt)")
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args()
    ours, default_tag = PEERS[args.peer]
    out_dir = ROOT / "out" / "compat"
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f"compat-{args.peer}-") as tmp, alias_in_subprocesses():
        tests = export_tests(args.checkout.resolve(), args.tag or default_tag, Path(tmp))
        modes = [("alias", f"{args.peer}:{ours}")]
        if not args.strict_only:
            modes.append(("alias-lenient", f"{args.peer}:{ours}"))
        if not args.skip_native and importlib.util.find_spec(args.peer) is not None:
            modes.insert(0, ("native", None))
        cases = {
            mode: run_suite(tests, mode, alias, args.pytest_args,
                            out_dir / f"{args.peer}-{mode}.json")
            for mode, alias in modes
        }
    results = {mode: by_function(outcomes) for mode, outcomes in cases.items()}
    saved_native = out_dir / f"{args.peer}-native.json"
    if "native" not in results and saved_native.exists():
        # A native run recorded earlier (nox -s compat) stays the reference where the peer is
        # not installed, e.g. in a development venv.
        print(f"[compat] reference: the native outcomes saved in {saved_native}", file=sys.stderr)
        results["native"] = by_function(json.loads(saved_native.read_text()))
    if "native" in results:
        reference = {f for f, o in results["native"].items() if o == "passed"}
    else:
        print("[compat] the peer is not installed here: comparing with every function",
              file=sys.stderr)
        reference = set(results["alias"])
    print(f"\n## {args.peer} suite through the alias ({len(reference)} reference functions)")
    for mode, outcomes in cases.items():
        counts = {o: sum(1 for v in outcomes.values() if v == o) for o in ("passed", "failed")}
        print(f"- {mode}: test cases {counts['passed']} passed, {counts['failed']} failed")
    for mode in results.keys() - {"native"}:
        passed = sorted(f for f in reference if results[mode].get(f) == "passed")
        print(f"- {mode}: {len(passed)}/{len(reference)} reference functions pass "
              f"({100 * len(passed) / max(len(reference), 1):.1f}%)")
    last = "alias" if args.strict_only else "alias-lenient"
    failing = sorted(f for f in reference if results[last].get(f) != "passed")
    if failing:
        print(f"\nReference functions failing in {last}:")
        for name in failing:
            print(f"  {results[last].get(name, 'absent')}: {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
