#!/usr/bin/env python3
"""Draw the gradient graph of one MAML outer loss, op-by-op Adam next to fused-optim's Adam.

A small MLP takes two differentiable inner Adam steps (``diffopt.MetaAdam``) on a sinusoid task;
the query loss is drawn with ``diffopt.visual.make_dot``, naming the meta-parameters (``step0.*``)
and the parameters after each inner step (``step1.*``, ``step2.*``). With
``use_accelerated_op=True`` every inner update is ONE orange ``FusedAdam`` node instead of the
dozens of element-wise nodes of the plain path. The script writes both graphs as SVG and PNG
and, with matplotlib, one PNG showing them side by side, then prints the node counts:

    python packages/diffopt/examples/visualize_maml.py [--out-dir maml_graphs]

Rendering needs Graphviz's ``dot`` (``sudo apt-get install graphviz``). A progress bar over the
renders runs on stderr (``--no-progress``, ``NO_PROGRESS=1`` or ``TQDM_DISABLE=1`` hides it); a
summary table of the two graphs closes the run.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import diffopt
from diffopt.visual import make_dot


def outer_loss(accelerated: bool, inner_steps: int, seed: int = 0):
    """The query loss after ``inner_steps`` MetaAdam steps, and the names of every step's
    parameters."""
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Linear(1, 8), nn.ReLU(), nn.Linear(8, 1))
    x = 10.0 * torch.rand(10, 1) - 5.0
    y = 2.0 * torch.sin(x + 0.5 * math.pi)
    inner = diffopt.MetaAdam(net, lr=0.05, use_accelerated_op=accelerated)
    names = [{f"step0.{n}": p for n, p in net.named_parameters()}]
    for step in range(inner_steps):
        inner.step(F.mse_loss(net(x[:5]), y[:5]))
        names.append({f"step{step + 1}.{n}": p for n, p in net.named_parameters()})
    loss = F.mse_loss(net(x[5:]), y[5:])
    return loss, names


def progress_bar(iterable, no_progress: bool, **kwargs):
    """A tqdm bar on stderr, so stdout keeps only the results."""
    try:
        from tqdm import tqdm
    except ImportError as error:
        raise ImportError("the progress bar needs tqdm: pip install 'diffopt[examples]'") from error
    if no_progress or os.environ.get("NO_PROGRESS", "") not in ("", "0"):
        kwargs["disable"] = True  # never pass disable=False: it would override TQDM_DISABLE=1
    return tqdm(iterable, file=sys.stderr, dynamic_ncols=True, **kwargs)


def side_by_side(left: Path, right: Path, titles: tuple[str, str], path: Path) -> bool:
    """One PNG with both pictures; ``False`` when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.image as mpimg
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    images = [mpimg.imread(left), mpimg.imread(right)]
    height = max(im.shape[0] for im in images)
    width = sum(im.shape[1] for im in images)
    fig, axes = plt.subplots(1, 2, figsize=(16, 16 * height / width + 1),
                             gridspec_kw={"width_ratios": [im.shape[1] for im in images]})
    for ax, image, title in zip(axes, images, titles):
        ax.imshow(image)
        ax.set_title(title)
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", type=Path, default=Path("maml_graphs"))
    parser.add_argument("--inner-steps", type=int, default=2)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = parser.parse_args(argv)
    if not diffopt.accelerated_op_available("cpu"):
        print("fused-optim is not installed: only the op-by-op graph can be drawn", file=sys.stderr)
        return 1
    if not diffopt.visual.dot_available():
        print("Graphviz's dot is missing: sudo apt-get install graphviz", file=sys.stderr)
        return 1
    args.out_dir.mkdir(parents=True, exist_ok=True)

    counts, pngs, written = {}, {}, {}
    bar = progress_bar(None, args.no_progress, total=4, desc="rendering", unit="file")
    for accelerated, tag in ((False, "unfused"), (True, "fused")):
        loss, names = outer_loss(accelerated, args.inner_steps)
        graph = make_dot(loss, params=(*names, {"outer loss": loss}))
        counts[tag] = sum(1 for line in graph.body if " [label=" in line and "->" not in line)
        for fmt in ("svg", "png"):
            bar.set_postfix_str(f"{tag} {fmt}")
            path = graph.render(args.out_dir / f"maml_{tag}", format=fmt, cleanup=True)
            written.setdefault(tag, []).append(path)
            bar.write(f"wrote {path}")
            bar.update()
        pngs[tag] = args.out_dir / f"maml_{tag}.png"
    bar.close()

    combined = args.out_dir / "maml_fused_vs_unfused.png"
    titles = (f"op-by-op Adam: {counts['unfused']} nodes",
              f"fused-optim Adam: {counts['fused']} nodes")
    if side_by_side(pngs["unfused"], pngs["fused"], titles, combined):
        print(f"wrote {combined}")
    print(f"{args.inner_steps} inner Adam steps: {counts['unfused']} nodes op-by-op, "
          f"{counts['fused']} with fused-optim ({counts['unfused'] / counts['fused']:.1f}x fewer)")
    print("\n| inner Adam update | graph nodes | files |\n|---|---:|---|")
    for tag, label in (("unfused", "op-by-op"), ("fused", "fused-optim (use_accelerated_op=True)")):
        print(f"| {label} | {counts[tag]} | {', '.join(str(p) for p in written[tag])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
