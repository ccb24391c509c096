"""The models federated-learning papers publish their benchmarks with, by name: LEAF's
FEMNIST CNN and Shakespeare LSTM (Caldas et al. 2018), FedProx's multinomial logistic
regression (Li et al. 2020) and the ResNet-18 with GroupNorm of Reddi et al. 2021
("Adaptive Federated Optimization": BatchNorm's running statistics do not average across
clients, so each norm layer is GroupNorm with two groups, after Hsieh et al. 2020)."""

from __future__ import annotations

import torch.nn as nn
import torch.nn.functional as F

from .nets import FedAvgCNN

#: LEAF's Shakespeare vocabulary size (``data.natural.leaf.LEAF_LETTERS``).
LEAF_VOCABULARY = 80


class LeafFemnistCNN(FedAvgCNN):
    """LEAF's FEMNIST CNN: 5x5 convolutions of 32 and 64 channels ("same" padding), each
    followed by ReLU and 2x2 max pooling, a dense layer of 2048 ReLU units and the class
    logits (6,603,710 parameters at 62 classes) -- McMahan et al.'s CNN with a wider dense
    layer."""

    def __init__(self, num_classes: int = 62):
        super().__init__(num_classes, hidden=2048)


class LeafShakespeareLSTM(nn.Module):
    """LEAF's next-character model: an 8-dimensional embedding of the 80 characters, two
    stacked LSTMs of 256 units, and the logits of the next character from the last step.

    Inputs are character indices of any integer dtype (LEAF data keeps them as uint8: one
    byte a character); they are cast to int64 for the embedding."""

    def __init__(self, vocabulary: int = LEAF_VOCABULARY, num_classes: int = LEAF_VOCABULARY,
                 embedding: int = 8, hidden: int = 256, layers: int = 2):
        super().__init__()
        self.embedding = nn.Embedding(vocabulary, embedding)
        self.lstm = nn.LSTM(embedding, hidden, num_layers=layers, batch_first=True)
        self.fc = nn.Linear(hidden, num_classes)

    def forward(self, x):
        out, _ = self.lstm(self.embedding(x.long()))
        return self.fc(out[:, -1])


class MultinomialLogisticRegression(nn.Module):
    """FedProx's ``mclr``: one linear layer to the class logits (softmax in the loss)."""

    def __init__(self, in_features: int, num_classes: int):
        super().__init__()
        self.linear = nn.Linear(in_features, num_classes)

    def forward(self, x):
        return self.linear(x.flatten(1))


class _BasicBlock(nn.Module):
    def __init__(self, in_channels: int, channels: int, stride: int, groups: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, channels, 3, stride, 1, bias=False)
        self.norm1 = nn.GroupNorm(groups, channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.norm2 = nn.GroupNorm(groups, channels)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_channels != channels:
            self.shortcut = nn.Sequential(nn.Conv2d(in_channels, channels, 1, stride, bias=False),
                                          nn.GroupNorm(groups, channels))

    def forward(self, x):
        out = F.relu(self.norm1(self.conv1(x)))
        return F.relu(self.norm2(self.conv2(out)) + self.shortcut(x))


class ResNet18GN(nn.Module):
    """ResNet-18 for 32x32 images (CIFAR's stem: one 3x3 convolution, no max pooling; four
    stages of two basic blocks, 64-512 channels; global average pooling), every norm
    GroupNorm of two groups (Reddi et al. 2021's CIFAR model)."""

    def __init__(self, in_channels: int = 3, num_classes: int = 10, groups: int = 2):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False),
                                  nn.GroupNorm(groups, 64), nn.ReLU())
        blocks, channels = [], 64
        for width, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks += [_BasicBlock(channels, width, stride, groups),
                       _BasicBlock(width, width, 1, groups)]
            channels = width
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x):
        x = self.blocks(self.stem(x))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))
