"""Stand-in for ``torchvision.datasets.MNIST``: generated digits of MNIST's shapes, no download.

``ci/compat/examples.py`` puts the folder above first on ``sys.path`` for the examples that load
MNIST. The data has MNIST's layout (60000 training and 10000 test ``uint8`` 28x28 images, labels
0-9, under both the current and the deprecated attribute names) and is drawn from a fixed seed:
a random stroke pattern per digit plus noise, so the classes are learnable and runs repeatable.
"""

from __future__ import annotations

import torch

__all__ = ["MNIST"]


class MNIST:
    def __init__(self, root=None, train=True, transform=None, target_transform=None,
                 download=False):
        del root, download  # nothing is read or downloaded
        self.transform, self.target_transform = transform, target_transform
        g = torch.Generator().manual_seed(7)
        patterns = (torch.rand(10, 28, 28, generator=g) > 0.75).float()
        g.manual_seed(1 if train else 2)
        n = 60000 if train else 10000
        self.targets = torch.randint(0, 10, (n,), generator=g)
        noisy = patterns[self.targets] * 0.8 + 0.2 * torch.rand(n, 28, 28, generator=g)
        self.data = (noisy * 255).to(torch.uint8)

    train_data = test_data = property(lambda self: self.data)
    train_labels = test_labels = property(lambda self: self.targets)

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, index):
        image, target = self.data[index], int(self.targets[index])
        if self.transform is not None:
            image = self.transform(image)
        if self.target_transform is not None:
            target = self.target_transform(target)
        return image, target
