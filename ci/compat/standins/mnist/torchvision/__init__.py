"""Stand-in for ``torchvision`` in the examples harness: only ``torchvision.datasets.MNIST``."""
