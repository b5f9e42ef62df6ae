"""The hyper-parameter examples run and learn: online hyper-gradient descent and Meta-SGD."""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import hypergradient_descent
import meta_sgd


def test_hypergradient_descent_raises_a_too_small_rate_and_trains_faster():
    plain = hypergradient_descent.train(steps=80, hypergradient=False)
    hd = hypergradient_descent.train(steps=80, hypergradient=True)
    assert plain["lrs"] == [torch.tensor(1e-3).item()] * 80 and plain["hypergradients"] == []
    assert len(hd["hypergradients"]) == 79
    assert hd["lrs"][-1] > 5 * hd["lrs"][0]  # the loss kept falling along the update direction
    assert hd["losses"][-1] < 0.8 * plain["losses"][-1]


def test_meta_sgd_learns_per_parameter_rates_and_beats_maml():
    options = {"iterations": 30, "meta_batch": 5, "meta_lr": 1e-2, "test_tasks": 40}
    result = meta_sgd.train(**options)
    maml = meta_sgd.train(**options, learn_rates=False)
    assert result["before"] == maml["before"]  # the same initialization and held-out tasks
    # Measured: 4.78 -> 3.69 (Meta-SGD) and -> 4.33 (MAML).
    assert result["after"] < 0.85 * result["before"]
    assert result["after"] < 0.95 * maml["after"]
    rates = torch.cat([a.flatten() for a in result["alphas"].values()])
    assert rates.shape == (sum(p.numel() for p in meta_sgd.make_model().parameters()),)
    assert float(rates.std()) > 1e-4  # each parameter's rate moved its own way from 0.01


def test_meta_sgd_inner_step_is_sgd_with_each_parameters_own_rate():
    params = {"a": torch.tensor([1.0, 2.0]), "b": torch.tensor([3.0])}
    alphas = {"a": torch.tensor([0.5, -1.0], requires_grad=True), "b": torch.tensor([2.0])}
    tx = meta_sgd.inner_optimizer(alphas)
    grads = {"a": torch.tensor([1.0, 1.0]), "b": torch.tensor([0.25])}
    updates, _ = tx.update(grads, tx.init(params), params=params, inplace=False)
    assert updates["a"].tolist() == [-0.5, 1.0] and updates["b"].tolist() == [-0.5]
    (grad,) = torch.autograd.grad(updates["a"].sum(), alphas["a"])
    assert grad.tolist() == [-1.0, -1.0]


def test_examples_quick_mode_runs(capsys):
    assert hypergradient_descent.main(["--quick"]) == 0
    assert "Adam-HD" in capsys.readouterr().out
