#!/usr/bin/env python3
"""Draw the recorded benchmark figures (benchmarks/RESULTS.md) as PNG charts.

    .venv/bin/python benchmarks/plot_results.py                 # writes benchmarks/plots/*.png
    .venv/bin/python benchmarks/plot_results.py --out /tmp/p    # somewhere else

It reads the Markdown tables that the benchmark scripts printed and that were recorded, with
their commands, in RESULTS.md, and the suite's recorded runs (benchmarks/results/<area>.json,
written by ``nox -s benchmarks`` through ``--benchmark-json``); it measures nothing itself. Each
chart shows peer time / our time (above 1: ours is faster) on a log scale, with the issue's
target as a dashed line where there is one. (pytest-benchmark's own ``--benchmark-histogram``
draws each workload's sample distribution; the nox session writes those too.)
"""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

HERE = Path(__file__).resolve().parent


def section(text: str, heading: str) -> str:
    """The body of the first Markdown section whose heading starts with `heading`."""
    match = re.search(rf"^(#+) {re.escape(heading)}.*$", text, flags=re.M)
    if match is None:
        raise ValueError(f"no section {heading!r} in RESULTS.md")
    level = len(match.group(1))
    rest = text[match.end():]
    end = re.search(rf"^#{{1,{level}}} ", rest, flags=re.M)
    return rest[: end.start()] if end else rest


def tables(body: str) -> list[list[dict[str, str]]]:
    """Every Markdown table in `body`, as rows keyed by the header cells."""
    found, lines = [], body.splitlines()
    i = 0
    while i < len(lines) - 1:
        if lines[i].startswith("|") and re.match(r"^\|[-| :]+\|$", lines[i + 1].strip()):
            header = [c.strip() for c in lines[i].strip().strip("|").split("|")]
            rows, j = [], i + 2
            while j < len(lines) and lines[j].startswith("|"):
                cells = [c.strip() for c in lines[j].strip().strip("|").split("|")]
                rows.append(dict(zip(header, cells)))
                j += 1
            found.append(rows)
            i = j
        else:
            i += 1
    return found


def _ratio(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


def bar_chart(ax, labels: list[str], series: dict[str, list[float | None]], target: float | None,
              title: str) -> None:
    width = 0.8 / max(len(series), 1)
    for k, (name, values) in enumerate(series.items()):
        xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(labels))]
        ax.bar(xs, [v if v is not None else 0 for v in values], width, label=name)
    ax.axhline(1.0, color="black", linewidth=0.8)
    if target is not None:
        ax.axhline(target, color="grey", linestyle="--", linewidth=0.8, label=f"target {target}x")
    ax.set_yscale("log")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=7)
    ax.set_ylabel("peer time / our time")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7)


def plot_pytree(results: str, out: Path) -> Path:
    body = section(results, "Run of 2026-11-22 10:15 UTC through the nox session")
    rows = [r for table in tables(body) for r in table if "resnet" in r.get("tree", "")]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), sharey=True)
    for ax, op in zip(axes, ("flatten", "unflatten", "map")):
        chosen = [r for r in rows if r["op"] == op]
        labels = [r["tree"] for r in chosen]
        series = {peer: [_ratio(r[f"{peer}/ours"]) for r in chosen]
                  for peer in ("optree", "jax", "torch", "dm-tree")}
        bar_chart(ax, labels, series, 1.1, f"optree-core {op}: ResNet trees")
    fig.tight_layout()
    path = out / "pytree_ratios.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_fused_step(results: str, out: Path) -> Path:
    body = section(results, "1 thread")
    step = next(t for t in tables(body) if t and "optimizer" in t[0])
    labels = [f"{r['optimizer']} {r['shapes']}" for r in step]
    # The table repeats the header "ratio" after each peer column; rebuild the pairs by position.
    header_line = next(line for line in body.splitlines() if line.startswith("| optimizer"))
    header = [c.strip() for c in header_line.strip().strip("|").split("|")]
    series: dict[str, list[float | None]] = {}
    for line in (x for x in body.splitlines() if x.startswith("|") and not x.startswith("| optimizer")
                 and not x.startswith("|---")):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != len(header):
            continue
        for k, name in enumerate(header):
            if name == "ratio":
                series.setdefault(f"vs {header[k - 1]}", []).append(_ratio(cells[k]))
    series = {k: v[: len(labels)] for k, v in series.items()}
    fig, ax = plt.subplots(figsize=(12, 4.5))
    bar_chart(ax, labels, series, 1.0, "fused-optim step() vs torch.optim (1 thread)")
    fig.tight_layout()
    path = out / "fused_optim_step.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def suite_medians(path: Path) -> dict[str, dict[str, tuple[float, bool]]]:
    """``{workload: {contender: (median seconds, is ours)}}`` from a suite run's JSON."""
    found: dict[str, dict[str, tuple[float, bool]]] = {}
    for bench in json.loads(path.read_text()).get("benchmarks", []):
        info = bench.get("extra_info", {})
        if "contender" in info and "workload" in info:
            found.setdefault(info["workload"], {})[info["contender"]] = (
                bench["stats"]["median"], bool(info.get("ours")))
    return found


def plot_suite(path: Path, out: Path) -> Path | None:
    """Each peer's median over our best median, per workload, from one recorded suite run
    (None when the run has no peer: distributed compares our own configurations)."""
    medians = suite_medians(path)
    labels, series = [], {}
    for workload, contenders in medians.items():
        ours = [t for t, is_ours in contenders.values() if is_ours]
        if not ours or all(is_ours for _, is_ours in contenders.values()):
            continue  # no ratio to draw: ours alone (a variant-against-variant workload)
        labels.append(workload)
        for name, (t, is_ours) in contenders.items():
            if not is_ours:
                series.setdefault(name, {})[workload] = t / min(ours)
    if not labels:
        return None
    fig, ax = plt.subplots(figsize=(max(8.0, 0.35 * len(labels) * max(len(series), 1)), 4.5))
    bar_chart(ax, labels, {name: [ratios.get(w) for w in labels] for name, ratios in series.items()},
              None, f"{path.stem}: peer median / our best median ({path.name})")
    fig.tight_layout()
    target = out / f"suite_{path.stem}.png"
    fig.savefig(target, dpi=110)
    plt.close(fig)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=HERE / "RESULTS.md")
    parser.add_argument("--out", type=Path, default=HERE / "plots")
    parser.add_argument("--suite", type=Path, nargs="*", default=None,
                        help="recorded suite runs to chart (default: benchmarks/results/*.json)")
    args = parser.parse_args(argv)
    suite = sorted((HERE / "results").glob("*.json")) if args.suite is None else args.suite
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.results.read_text()
    started = time.perf_counter()
    written = []
    for plot in (plot_pytree, plot_fused_step):
        written.append(plot(results, args.out))
        print(f"wrote {written[-1]}")
    for path in suite:
        chart = plot_suite(path, args.out)
        if chart is not None:
            written.append(chart)
            print(f"wrote {chart}")
    print(f"{len(written)} charts from {args.results} in {args.out} "
          f"({time.perf_counter() - started:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
