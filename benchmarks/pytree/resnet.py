"""ResNet-18/50/101/152 (He et al., 2016) in plain torch, so the pytree benchmark needs no
torchvision. Only the parameter-and-buffer layout matters here: the layer names, shapes and
BatchNorm buffers follow the standard ImageNet ResNet definition."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch
from torch import nn


def _conv3x3(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)


def _conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, width: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = _conv3x3(cin, width, stride)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(width, width)
        self.bn2 = nn.BatchNorm2d(width)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int = 1, downsample: nn.Module | None = None):
        super().__init__()
        self.conv1 = _conv1x1(cin, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = _conv3x3(width, width, stride)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = _conv1x1(width, width * self.expansion)
        self.bn3 = nn.BatchNorm2d(width * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + identity)


class ResNet(nn.Module):
    def __init__(self, block: type[nn.Module], layers: list[int], num_classes: int = 1000):
        super().__init__()
        self.cin = 64
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._stage(block, 64, layers[0])
        self.layer2 = self._stage(block, 128, layers[1], stride=2)
        self.layer3 = self._stage(block, 256, layers[2], stride=2)
        self.layer4 = self._stage(block, 512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)

    def _stage(self, block: Any, width: int, blocks: int, stride: int = 1) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.cin != width * block.expansion:
            downsample = nn.Sequential(
                _conv1x1(self.cin, width * block.expansion, stride),
                nn.BatchNorm2d(width * block.expansion),
            )
        stage = [block(self.cin, width, stride, downsample)]
        self.cin = width * block.expansion
        stage += [block(self.cin, width) for _ in range(1, blocks)]
        return nn.Sequential(*stage)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


ARCHITECTURES = {
    "resnet18": (BasicBlock, [2, 2, 2, 2]),
    "resnet50": (Bottleneck, [3, 4, 6, 3]),
    "resnet101": (Bottleneck, [3, 4, 23, 3]),
    "resnet152": (Bottleneck, [3, 8, 36, 3]),
}


def resnet(name: str, device: str = "cpu") -> ResNet:
    block, layers = ARCHITECTURES[name]
    with torch.device(device):
        return ResNet(block, layers)


def module_tree(module: nn.Module) -> dict[str, Any]:
    """The module hierarchy as nested dicts: each module's own parameters and buffers, then
    one sub-dict per child module, with tensors as leaves (TorchOpt's extract_state_dict shape)."""
    tree: dict[str, Any] = {}
    for name, param in module.named_parameters(recurse=False):
        tree[name] = param
    for name, buffer in module.named_buffers(recurse=False):
        tree[name] = buffer
    for name, child in module.named_children():
        tree[name] = module_tree(child)
    return tree


def state_dict_tree(module: nn.Module) -> OrderedDict[str, torch.Tensor]:
    """The flat OrderedDict of every parameter and buffer, as ``module.state_dict()`` gives."""
    return module.state_dict(keep_vars=True)
