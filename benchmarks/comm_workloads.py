"""The communication-bound workloads of issue 24, as user code for mptrain and for the plain
torch DDP baseline alike: synthetic 32x32 colour images in 10 classes, a 5.9M-parameter MLP
and a ResNet-18 for 32x32 inputs (CIFAR stem). No torchvision, no download.

    mptrain run --strategy ddp --data benchmarks/comm_workloads.py:synthetic_images \\
        --model benchmarks/comm_workloads.py:resnet18_32

Data factories return ``(train, test)`` as ``TensorDataset``s; model factories take no
argument (mptrain seeds torch before calling them, so ``--seed`` decides the weights).
Everything is a module-level function: spawn'd workers import this file again by name.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import TensorDataset

CLASSES = 10
IMAGE = (3, 32, 32)
DATA_SEED = 20261123


def make_images(train_size: int, test_size: int, seed: int = DATA_SEED):
    """Seeded, learnable but not trivial images: each class has a smooth random pattern
    (8x8 noise upsampled to 32x32), and a sample is 0.35 x its class's pattern plus unit
    Gaussian noise per pixel. A linear model separates the classes after a few hundred
    steps; the loss falling and the accuracy rising above 10% is the sanity check."""
    generator = torch.Generator().manual_seed(seed)
    patterns = F.interpolate(torch.randn(CLASSES, 3, 8, 8, generator=generator),
                             size=IMAGE[1:], mode="bilinear", align_corners=False)
    patterns /= patterns.std(dim=(1, 2, 3), keepdim=True)

    def split(count):
        labels = torch.randint(CLASSES, (count,), generator=generator)
        images = torch.randn(count, *IMAGE, generator=generator)
        images.add_(patterns[labels], alpha=0.35)
        return TensorDataset(images, labels)

    return split(train_size), split(test_size)


def synthetic_images():
    """25,600 training images (200 steps of batch 64 on each of 2 workers, 315 MB as
    float32) and 2,000 test images."""
    return make_images(25_600, 2_000)


def synthetic_images_small():
    """1,024 training and 256 test images: for ``--smoke`` runs that only check the code."""
    return make_images(1_024, 256)


class MLP6M(nn.Module):
    """3072-1536-768-10 with ReLU: 5,908,234 parameters, almost all in the first layer, and
    little compute per parameter -- the gradient average is a large part of a step."""

    def __init__(self, hidden=(1536, 768)):
        super().__init__()
        sizes = (IMAGE[0] * IMAGE[1] * IMAGE[2], *hidden)
        self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))
        self.out = nn.Linear(sizes[-1], CLASSES)

    def forward(self, x):
        x = x.flatten(1)   # flatten, not view: works for channels-last inputs too
        for layer in self.hidden:
            x = F.relu(layer(x))
        return self.out(x)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, in_planes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride, bias=False),
                                          nn.BatchNorm2d(planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet32(nn.Module):
    """ResNet-18 for 32x32 inputs as in the CIFAR literature (kuangliu/pytorch-cifar): a
    3x3 stride-1 stem without max-pooling, BasicBlocks [2, 2, 2, 2] of 64-512 channels,
    global average pooling: 11,173,962 parameters and 9,600 BatchNorm running statistics."""

    def __init__(self, blocks=(2, 2, 2, 2), num_classes: int = CLASSES):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, in_planes = [], 64
        for index, count in enumerate(blocks):
            planes = 64 * 2 ** index
            for block in range(count):
                stride = 2 if index > 0 and block == 0 else 1
                layers.append(BasicBlock(in_planes, planes, stride))
                in_planes = planes
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(in_planes, num_classes)

    def forward(self, x):
        out = self.layers(F.relu(self.bn1(self.conv1(x))))
        out = F.adaptive_avg_pool2d(out, 1).flatten(1)
        return self.fc(out)


def mlp_6m():
    return MLP6M()


def resnet18_32():
    return ResNet32()


#: The workloads by the names ``comm_bound.py --models`` takes.
MODELS = {"mlp": mlp_6m, "resnet18": resnet18_32}
