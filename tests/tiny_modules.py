"""Small stand-ins for vLLM's linear layers, shared by the installer tests
(CPU, tests/test_install.py) and the GPU runtime tests
(tests/gpu/test_gpu_runtime.py)."""

import torch
from torch import nn


class QuantMethod:
    """Stands in for vLLM's per-layer UnquantizedLinearMethod: the GEMM is
    ``quant_method.apply(layer, x)``, the hook point the installer wraps."""

    def apply(self, layer, x):
        return x @ layer.weight.t()


class Proj(nn.Module):
    """A linear layer ``n -> m`` whose forward goes through ``quant_method``;
    weight ``(m, n)`` random normal of ``dtype``, times ``scale``."""

    def __init__(self, n, m, dtype=torch.float32, scale=1.0):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(m, n, dtype=dtype) * scale)
        self.quant_method = QuantMethod()

    def forward(self, x):
        return self.quant_method.apply(self, x)
