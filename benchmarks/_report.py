"""The closing summary of a benchmark run: peer/ours ratios against the issues' targets.

The suite (benchmarks/_suite.py) collects each comparison's ratios (peer time / our time: above
1, ours is faster) into :class:`Comparison` objects, one per peer (or per peer and operation),
and ends each section with :func:`summary_table`: geometric mean, min and max per comparison,
the rows below the target the issue set, and a one-line verdict.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

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
