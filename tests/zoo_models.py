"""Two vision models as their papers define them, written here so the zoo
needs no torchvision (whose PyPI wheel cannot load its C extension beside
this machine's CPU torch, and then breaks other libraries' imports):

- ResNet-18 (He et al., "Deep Residual Learning for Image Recognition",
  2016): a 7x7 stem, max pooling, four stages of two basic blocks (3x3-3x3
  with a 1x1 projection where the shape changes), global pooling, a linear
  classifier;
- MobileNetV3-Small (Howard et al., "Searching for MobileNetV3", 2019,
  table 2): inverted residual blocks with depthwise convolutions,
  squeeze-and-excitation, hard-swish, and a 1x1 head.

Weights are random (Kaiming-normal convolutions, unit batch norms), as the
zoo tests use them; the layers and the ops they send are those of the
published architectures.
"""
from __future__ import annotations

import torch.nn as nn


def _init(model: nn.Module) -> nn.Module:
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0, 0.01)
            nn.init.zeros_(m.bias)
    return model


# ------------------------------------------------------------------ ResNet-18

class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    def __init__(self, num_classes: int = 1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        stages, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            stages.append(nn.Sequential(BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)))
            cin = cout
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, num_classes)
        _init(self)
        for m in self.fc.modules():      # the classifier keeps PyTorch's default initialisation
            m.reset_parameters()

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.avgpool(x).flatten(1))


# ---------------------------------------------------------- MobileNetV3-Small

def _divisible(v: float, by: int = 8) -> int:
    """Channel counts rounded to a multiple of 8, never below 90% of v (the paper's rule)."""
    n = max(by, int(v + by / 2) // by * by)
    return n + by if n < 0.9 * v else n


class SqueezeExcitation(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        squeeze = _divisible(channels // 4)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, channels, 1)
        self.relu = nn.ReLU()
        self.gate = nn.Hardsigmoid()

    def forward(self, x):
        return x * self.gate(self.fc2(self.relu(self.fc1(self.avgpool(x)))))


def _conv_bn(cin, cout, k, stride=1, groups=1, act=None):
    layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False),
              nn.BatchNorm2d(cout, eps=0.001, momentum=0.01)]
    if act is not None:
        layers.append(act())
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, cin, k, expand, cout, se, act, stride):
        super().__init__()
        layers = []
        if expand != cin:
            layers.append(_conv_bn(cin, expand, 1, act=act))
        layers.append(_conv_bn(expand, expand, k, stride, groups=expand, act=act))
        if se:
            layers.append(SqueezeExcitation(expand))
        layers.append(_conv_bn(expand, cout, 1))
        self.block = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        out = self.block(x)
        return out + x if self.residual else out


# (kernel, expanded channels, out channels, squeeze-excitation, activation, stride): table 2
_SMALL = [(3, 16, 16, True, nn.ReLU, 2), (3, 72, 24, False, nn.ReLU, 2), (3, 88, 24, False, nn.ReLU, 1),
          (5, 96, 40, True, nn.Hardswish, 2), (5, 240, 40, True, nn.Hardswish, 1),
          (5, 240, 40, True, nn.Hardswish, 1), (5, 120, 48, True, nn.Hardswish, 1),
          (5, 144, 48, True, nn.Hardswish, 1), (5, 288, 96, True, nn.Hardswish, 2),
          (5, 576, 96, True, nn.Hardswish, 1), (5, 576, 96, True, nn.Hardswish, 1)]


class MobileNetV3Small(nn.Module):
    def __init__(self, num_classes: int = 1000, dropout: float = 0.2):
        super().__init__()
        layers, cin = [_conv_bn(3, 16, 3, 2, act=nn.Hardswish)], 16
        for k, expand, cout, se, act, stride in _SMALL:
            layers.append(InvertedResidual(cin, k, expand, cout, se, act, stride))
            cin = cout
        layers.append(_conv_bn(cin, 576, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(nn.Linear(576, 1024), nn.Hardswish(), nn.Dropout(dropout),
                                        nn.Linear(1024, num_classes))
        _init(self)

    def forward(self, x):
        return self.classifier(self.avgpool(self.features(x)).flatten(1))


MODELS = {"resnet18": ResNet18, "mobilenet_v3_small": MobileNetV3Small}
