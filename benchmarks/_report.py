"""Progress bars and the closing summary table, shared by the benchmark scripts.

The bar goes to stderr, so stdout carries only what belongs in ``RESULTS.md`` (markdown tables
and their notes). Lines printed while a bar is live go through :func:`write`, which lifts the bar
out of the way and puts it back underneath. Bars are off with ``--no-progress``,
``NO_PROGRESS=1`` or tqdm's own ``TQDM_DISABLE=1``, and when stderr is not a terminal but the
same pipe or file as stdout (``2>&1 | tee out.md``), where a bar would land inside the tables;
without tqdm installed the scripts run the same, without a bar.

Each script collects its ratios (peer time / our time: above 1, ours is faster) into
:class:`Comparison` objects, one per peer (or per peer and operation), and ends with
:func:`summary_table`: geometric mean, min and max per comparison, the rows below the target the
issue set, and a one-line verdict.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TextIO

try:
    from tqdm import tqdm
except ImportError:  # a throwaway venv without tqdm: the same output, without a bar
    tqdm = None


def add_progress_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bar on stderr (also NO_PROGRESS=1 or TQDM_DISABLE=1)")


def progress_off(no_progress: bool = False) -> bool:
    """Whether the user turned bars off (the flag or NO_PROGRESS; tqdm reads TQDM_DISABLE)."""
    return no_progress or os.environ.get("NO_PROGRESS", "").strip().lower() not in (
        "", "0", "false", "no")


def _stderr_is_stdout_capture() -> bool:
    """stderr goes to the same pipe or file as stdout, and that is not a terminal."""
    try:
        if sys.stderr.isatty():
            return False
        out, err = os.fstat(sys.stdout.fileno()), os.fstat(sys.stderr.fileno())
    except (AttributeError, OSError, ValueError):  # replaced streams without a file descriptor
        return False
    return (out.st_dev, out.st_ino) == (err.st_dev, err.st_ino)


class _NoBar:
    """What :func:`progress` returns when tqdm is missing: iterates, ignores the bar calls."""

    def __init__(self, iterable: Iterable[Any] | None) -> None:
        self._iterable = iterable if iterable is not None else ()

    def __iter__(self) -> Iterator[Any]:
        return iter(self._iterable)

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def set_postfix_str(self, *args: Any, **kwargs: Any) -> None:
        pass

    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def progress(iterable: Iterable[Any] | None = None, *, desc: str, total: int | None = None,
             unit: str = "case", no_progress: bool = False) -> Any:
    """A tqdm bar on stderr over ``iterable`` (or updated by hand when it is None)."""
    if tqdm is None:
        return _NoBar(iterable)
    options: dict[str, Any] = {}
    if progress_off(no_progress) or _stderr_is_stdout_capture():
        # Only ever pass disable=True: an explicit disable=False would override TQDM_DISABLE.
        options["disable"] = True
    return tqdm(iterable, desc=desc, total=total, unit=unit, file=sys.stderr, dynamic_ncols=True,
                leave=False, **options)


def write(line: str = "", file: TextIO | None = None) -> None:
    """Print a line (to stdout by default) without tearing a live bar."""
    file = sys.stdout if file is None else file
    if tqdm is None:
        print(line, file=file)
    else:
        tqdm.write(line, file=file)
    file.flush()


# --- the summary ---------------------------------------------------------------------------------


@dataclass
class Comparison:
    """Ratios of one peer against ours over a benchmark's rows, and the issue's target for them.

    ``scope`` says which rows the target covers when not all of them (``"200 x 1k"``); a row is
    covered when it is added with ``targeted=True``.
    """

    name: str
    target: float | None = None
    scope: str = ""
    ratios: dict[str, float] = field(default_factory=dict)
    targeted: list[str] = field(default_factory=list)

    def add(self, row: str, ratio: float | None, *, targeted: bool = True) -> None:
        """Record one row's ratio; a missing or non-finite one (peer absent) is left out."""
        if ratio is None or not math.isfinite(ratio) or ratio <= 0:
            return
        self.ratios[row] = ratio
        if targeted and self.target is not None:
            self.targeted.append(row)

    def misses(self) -> list[str]:
        return [row for row in self.targeted if self.ratios[row] < self.target]


def geometric_mean(values: Iterable[float]) -> float:
    logs = [math.log(v) for v in values]
    return math.exp(sum(logs) / len(logs))


def _rows_text(rows: list[str], limit: int = 4) -> str:
    shown = ", ".join(rows[:limit])
    return shown + (f", +{len(rows) - limit} more" if len(rows) > limit else "")


def _target_text(comparison: Comparison) -> str:
    if comparison.target is None:
        return "-"
    return f">= {comparison.target:g}x" + (f" on {comparison.scope}" if comparison.scope else "")


def summary_table(comparisons: list[Comparison], title: str = "Summary",
                  note: str = "ratio = peer time / our time; above 1: ours is faster") -> str:
    """A markdown table of every comparison and a verdict line on the targets."""
    lines = [f"### {title} ({note})", "",
             "| comparison | rows | geo-mean | min | max | rows < 1 | target | below target |",
             "|---|---:|---:|---:|---:|---:|---|---|"]
    met, missed, unmeasured = [], [], []
    for c in comparisons:
        if not c.ratios:
            lines.append(f"| {c.name} | 0 | - | - | - | - | {_target_text(c)} | not measured |")
            if c.target is not None:
                unmeasured.append(c.name)
            continue
        low = min(c.ratios, key=c.ratios.__getitem__)
        high = max(c.ratios, key=c.ratios.__getitem__)
        behind = sum(r < 1.0 for r in c.ratios.values())
        if c.target is None:
            below = "-"
        elif not c.targeted:
            below = "not measured"
            unmeasured.append(f"{c.name} ({c.scope or 'its rows'} not run)")
        elif c.misses():
            below = f"{len(c.misses())}/{len(c.targeted)}: {_rows_text(c.misses())}"
            missed.append(f"{c.name} {_target_text(c)} ({len(c.misses())}/{len(c.targeted)} rows)")
        else:
            below = "none"
            met.append(c.name)
        lines.append(
            f"| {c.name} | {len(c.ratios)} | {geometric_mean(c.ratios.values()):.2f}x | "
            f"{c.ratios[low]:.2f}x ({low}) | {c.ratios[high]:.2f}x ({high}) | {behind} | "
            f"{_target_text(c)} | {below} |")
    measured = len(met) + len(missed)
    if measured:
        verdict = f"{len(met)} of {measured} targets met"
    else:
        verdict = "no target measured" if unmeasured else "no targets for these rows"
    if missed:
        verdict += "; missed: " + "; ".join(missed)
    if unmeasured:
        verdict += "; not measured: " + "; ".join(unmeasured)
    lines += ["", f"Verdict: {verdict}."]
    return "\n".join(lines)
