"""The DEQ example: implicit training reaches the unrolled one's accuracy with far less memory."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import deq


def test_implicit_deq_matches_unrolled_accuracy_with_less_memory():
    implicit = deq.train("implicit", **deq.QUICK)
    unrolled = deq.train("unrolled", **deq.QUICK)
    assert unrolled["accuracy"] > 0.8  # chance is 1/3: the task is learned
    assert implicit["accuracy"] >= unrolled["accuracy"] - 0.03
    # The implicit backward keeps one cell's tensors, not 30 applications' worth.
    assert implicit["memory_kib"] < unrolled["memory_kib"] / 5
    # Anderson reaches the fixed point in fewer cell evaluations than the unrolled baseline takes.
    assert implicit["iterations"] < 30
