"""Stand-in for the examples' ``helpers/omniglot_loaders.py``: generated data, no download.

``ci/compat/examples.py`` puts this folder first on ``sys.path`` so that an example's
``from helpers.omniglot_loaders import OmniglotNShot`` finds this class. It has the interface the
examples use (``x_train``, ``x_test``, ``batchsz``, ``next(mode)``) and Omniglot's shapes: 1623
classes of 20 single-channel ``imgsz x imgsz`` images, 1200 classes for training, episodes of
``n_way`` classes with ``k_shot`` support and ``k_query`` query images. Only the test split is
cut short, to one meta-batch worth of classes (at least ``n_way``): the examples evaluate the
whole test split before their first training step, and a harness run is meant to reach training
within a few minutes. Images are a fixed random prototype per class plus noise, drawn from a
fixed seed per class, so two runs see the same data; tasks are sampled with the ``rng`` the
example passes, as the real loader does.
"""

from __future__ import annotations

import numpy as np
import torch

N_CLASSES, N_IMAGES, N_TRAIN_CLASSES = 1623, 20, 1200


class _Classes:
    """``[n_classes, 20, 1, imgsz, imgsz]`` images, each class drawn when first asked for.

    Drawing all of Omniglot's 25 million pixels up front takes a minute on a busy machine; a
    class is drawn from its own seed instead, so the data do not depend on the order of access.
    """

    def __init__(self, first: int, count: int, imgsz: int) -> None:
        self.first, self.imgsz = first, imgsz
        self.shape = (count, N_IMAGES, 1, imgsz, imgsz)
        self._cache: dict[int, np.ndarray] = {}

    def __getitem__(self, cls: int) -> np.ndarray:
        if cls not in self._cache:
            rng = np.random.default_rng(20230000 + self.first + int(cls))
            size = (1, self.imgsz, self.imgsz)
            prototype = (rng.random(size, dtype=np.float32) > 0.8).astype(np.float32)
            noise = rng.standard_normal((N_IMAGES, *size), dtype=np.float32) * 0.3
            self._cache[cls] = (prototype + noise - 0.2) / 0.5  # roughly zero mean, unit scale
        return self._cache[cls]


class OmniglotNShot:
    def __init__(self, root, batchsz, n_way, k_shot, k_query, imgsz, rng, device=None):
        del root  # nothing is read or downloaded
        n_test = max(batchsz, n_way)  # one meta-batch of test episodes per evaluation
        self.x_train = _Classes(0, N_TRAIN_CLASSES, imgsz)
        self.x_test = _Classes(N_TRAIN_CLASSES, n_test, imgsz)
        self.batchsz, self.n_way, self.k_shot, self.k_query = batchsz, n_way, k_shot, k_query
        self.rng, self.device = rng, device

    def _episode(self, data: _Classes):
        support, query = [], []
        for label, cls in enumerate(self.rng.choice(data.shape[0], self.n_way, replace=False)):
            picked = self.rng.choice(N_IMAGES, self.k_shot + self.k_query, replace=False)
            images = data[cls][picked]
            support += [(img, label) for img in images[: self.k_shot]]
            query += [(img, label) for img in images[self.k_shot:]]
        out = []
        for pairs in (support, query):
            order = self.rng.permutation(len(pairs))
            out.append(np.stack([pairs[i][0] for i in order]))
            out.append(np.array([pairs[i][1] for i in order], dtype=np.int64))
        return out

    def next(self, mode="train"):
        data = self.x_train if mode == "train" else self.x_test
        episodes = [self._episode(data) for _ in range(self.batchsz)]
        return tuple(torch.from_numpy(np.stack(part)).to(self.device) for part in zip(*episodes))
