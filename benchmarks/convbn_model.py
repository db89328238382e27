"""A conv + BatchNorm CNN for `torchmark tune` on a GPU (benchmarks/gpu_plan.sh, step 3).

ResNet-18's stem (7x7 conv, BatchNorm, ReLU, max-pool) and three of its basic blocks (64,
128 and 256 channels, each two 3x3 convs with BatchNorm and a shortcut), then a pooled
linear head: 1.49 M parameters, 1.42 GFLOP per 224 px image. torch.nn only, weights seeded.
It is the kind of model whose fp32 baseline cuDNN runs in TF32 by default: a tune whose own
reference does the same reads an error of ~1.5e-4 and calls the baseline WRONG.

    torchmark tune benchmarks/convbn_model.py:make_model --input 3x224x224 -d cuda
"""

from __future__ import annotations

import torch
from torch import nn


class Block(nn.Module):
    """A ResNet basic block: conv-BN-ReLU-conv-BN plus the shortcut, then ReLU."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down: nn.Module = nn.Identity()
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.down(x))


class ConvBN(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        )
        self.blocks = nn.Sequential(Block(64, 64, 1), Block(64, 128, 2), Block(128, 256, 2))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))


def make_model() -> nn.Module:
    torch.manual_seed(0)
    model = ConvBN()
    # BatchNorm with its initial statistics (mean 0, var 1) is nearly the identity; set them
    # as a trained network's would be, so eval-mode BN does real arithmetic.
    gen = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            n = m.num_features
            m.load_state_dict(
                {
                    "running_mean": torch.randn(n, generator=gen) * 0.1,
                    "running_var": torch.rand(n, generator=gen) + 0.5,
                    "weight": torch.rand(n, generator=gen) + 0.5,
                    "bias": torch.randn(n, generator=gen) * 0.1,
                },
                strict=False,  # num_batches_tracked stays
            )
    return model
