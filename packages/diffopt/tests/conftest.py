"""Test configuration: makes ``helpers`` and ``_reference`` importable from every test folder."""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))

# Two cores are shared by the whole CI run: keep intra-op threading modest and deterministic.
torch.set_num_threads(1)
