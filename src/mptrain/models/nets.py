"""Built-in networks, small enough to train on two CPU cores."""

import torch.nn as nn
import torch.nn.functional as F


class DigitsCNN(nn.Module):
    """A small CNN for the 8x8 UCI digits: two 3x3 convolutions, one pooling, two linear layers."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, kernel_size=3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, kernel_size=3, padding=1)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, num_classes)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


class MnistCNN(nn.Module):
    """The classic MNIST CNN of PyTorch's examples (mnist, mnist_hogwild), kept as published so
    that throughput and accuracy compare with the figures people know -- but for one word:
    ``flatten(1)`` where they wrote ``view(-1, 320)``, the same on NCHW tensors, and it also
    accepts channels-last ones (engine.channels_last evaluates in that layout)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
        self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.flatten(1)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


class MLP(nn.Module):
    """A two-layer perceptron for flat or image inputs of any size."""

    def __init__(self, in_features: int, out_features: int, hidden: int = 128):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(in_features, hidden), nn.ReLU(),
                                 nn.Linear(hidden, out_features))

    def forward(self, x):
        return self.net(x)


class Mnist2NN(nn.Module):
    """McMahan et al. 2017's "2NN": an MLP with two hidden layers of 200 ReLU units
    (199,210 parameters on 28x28 inputs), the FedAvg paper's first MNIST model."""

    def __init__(self, in_features: int = 784, num_classes: int = 10, hidden: int = 200):
        super().__init__()
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(in_features, hidden), nn.ReLU(),
                                 nn.Linear(hidden, hidden), nn.ReLU(),
                                 nn.Linear(hidden, num_classes))

    def forward(self, x):
        return self.net(x)


class FedAvgCNN(nn.Module):
    """McMahan et al. 2017's MNIST CNN: two 5x5 convolutions (32, 64 channels) each followed
    by 2x2 max pooling, a fully connected layer of 512 ReLU units and a linear output
    (1,663,370 parameters; "same" padding as in the paper, so 28 -> 14 -> 7). ``hidden``:
    the dense layer's units (LEAF's FEMNIST CNN is this network with 2048)."""

    def __init__(self, num_classes: int = 10, hidden: int = 512):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, kernel_size=5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, kernel_size=5, padding=2)
        self.fc1 = nn.Linear(64 * 7 * 7, hidden)
        self.fc2 = nn.Linear(hidden, num_classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)
