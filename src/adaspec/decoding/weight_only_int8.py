"""Weight-only int8 serving (`Serving(weights="int8")`, a `-int8` serving name): gpt-fast's `WeightOnlyInt8Linear`.

Each `nn.Linear` keeps its weight as int8 with one scale per output row (symmetric, absmax / 127) and computes
`linear(x, int8 weight cast to x's dtype) * scale`, on the CPU with PyTorch's fused kernel for exactly that
(`aten._weight_int8pack_mm`): a quarter of float32's bytes
to read (half of bfloat16's), the activations untouched. Tied embeddings stay as they are (the output head gets
its own int8 copy). Whether that is cheaper here is `make bench-costs`'s to say, not this docstring's.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F


class WeightOnlyInt8Linear(nn.Module):
    def __init__(self, linear: nn.Linear):
        super().__init__()
        weight = linear.weight.detach().float()
        scale = weight.abs().amax(dim=1).clamp(min=1e-12) / 127
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.register_buffer("weight", torch.round(weight / scale[:, None]).to(torch.int8))
        self.register_buffer("scales", scale.to(linear.weight.dtype))
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().clone())

    def forward(self, x: Tensor) -> Tensor:
        if x.device.type == "cpu" and x.dtype == self.scales.dtype:  # PyTorch's fused CPU kernel: no float copy
            flat = torch.ops.aten._weight_int8pack_mm(x.reshape(-1, self.in_features), self.weight, self.scales)
            out = flat.reshape(*x.shape[:-1], self.out_features)
        else:
            out = F.linear(x, self.weight.to(x.dtype)) * self.scales.to(x.dtype)
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 weights"


def quantize_weight_only_int8(model: nn.Module) -> nn.Module:
    """Replace every `nn.Linear` of `model` in place (output head included) and return it."""
    for name, child in list(model.named_children()):
        if isinstance(child, nn.Linear):
            setattr(model, name, WeightOnlyInt8Linear(child))
        else:
            quantize_weight_only_int8(child)
    return model
