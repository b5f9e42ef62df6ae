"""benchmarks/plot_results.py draws the recorded figures; the committed charts are its output."""

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("plot_results",
                                                  ROOT / "benchmarks" / "plot_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_plots_are_drawn_from_results(tmp_path):
    pytest.importorskip("matplotlib")
    plot_results = _load()
    assert plot_results.main(["--out", str(tmp_path)]) == 0
    for name in ("pytree_ratios.png", "fused_optim_step.png"):
        data = (tmp_path / name).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 10_000
        assert (ROOT / "benchmarks" / "plots" / name).exists(), f"commit benchmarks/plots/{name}"


def test_markdown_tables_are_parsed_by_header():
    plot_results = _load()
    rows = plot_results.tables("x\n| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |\ntext\n")
    assert rows == [[{"a": "1", "b": "2"}, {"a": "3", "b": "4"}]]
    assert plot_results.section("# T\n## A one\nbody\n## B\nother\n", "A").strip() == "body"


def test_suite_runs_are_charted_from_their_json(tmp_path):
    pytest.importorskip("matplotlib")
    plot_results = _load()
    run = {"benchmarks": [
        {"stats": {"median": seconds}, "extra_info": {"workload": workload, "contender": name,
                                                      "ours": name == "ours"}}
        for workload, name, seconds in [("a 1", "ours", 1.0), ("a 1", "peer", 3.0),
                                        ("a 2", "ours", 2.0), ("a 2", "peer", 1.0),
                                        ("a 3", "peer", 1.0)]]}
    path = tmp_path / "area.json"
    path.write_text(json.dumps(run))
    assert plot_results.suite_medians(path)["a 2"] == {"ours": (2.0, True), "peer": (1.0, False)}
    chart = plot_results.plot_suite(path, tmp_path)
    assert chart.name == "suite_area.png" and chart.read_bytes().startswith(b"\x89PNG")
