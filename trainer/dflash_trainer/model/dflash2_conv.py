"""DFlash2's grouped dynamic causal convolution inside each draft block.

`out[i, c] = sum_t (base[t, c] + delta[i, t, c // group]) * x[i - t, c]`, with taps that would
reach into the previous block zeroed. The layer that places it around attention and the MLP
is in `model/dflash2_drafter.py`; the candidate selector in `model/dflash2_selector.py`.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional

# A convolution module holds two kernels: index 0 convolves the sublayer's input, index 1 its
# output (vLLM's `prepare`/`finish`); both deltas come from one projection of the input.
INPUT_SIDE = 0
OUTPUT_SIDE = 1
SIDES = 2


def grouped_causal_conv(
    x: torch.Tensor, delta: torch.Tensor, base: torch.Tensor, block_size: int
) -> torch.Tensor:
    """`x [..., n, H]`, `delta [..., n, taps, G]`, `base [taps, H]` -> `[..., n, H]`.

    The sequence axis holds whole blocks back to back, so the slot of row i is `i % block_size`;
    a tap t contributes only where `slot >= t`, which keeps every block independent.
    """
    taps, hidden = base.shape
    groups = delta.shape[-1]
    n = x.shape[-2]
    grouped = x.reshape(*x.shape[:-1], groups, hidden // groups)
    # [..., n, taps, G, 1] + [taps, G, group] -> per-row, per-channel coefficients.
    coefficients = base.view(taps, groups, -1).to(x.dtype) + delta.unsqueeze(-1).to(x.dtype)
    out = coefficients[..., 0, :, :] * grouped
    slot = torch.arange(n, device=x.device) % block_size
    for tap in range(1, min(taps, n)):
        # Row i reads row i - tap; the first `tap` rows read zeros (and are masked anyway).
        shifted = functional.pad(grouped[..., :-tap, :, :], (0, 0, 0, 0, tap, 0))
        inside_block = (slot >= tap).view(n, 1, 1).to(x.dtype)
        out = out + coefficients[..., tap, :, :] * shifted * inside_block
    flat: torch.Tensor = out.flatten(-2)
    return flat


class GroupedDynamicConv(nn.Module):
    """Input- and output-side convolutions around one sublayer (attention or MLP).

    Parameters as vLLM loads them: `base_kernel [2, taps, H]` and
    `kernel_projection.weight [2 * taps * H / group, H]` (rows ordered side, tap, group).
    """

    def __init__(self, hidden_size: int, taps: int, group_size: int, block_size: int) -> None:
        super().__init__()
        self.taps = taps
        self.groups = hidden_size // group_size
        self.block_size = block_size
        self.base_kernel = nn.Parameter(torch.empty(SIDES, taps, hidden_size))
        self.kernel_projection = nn.Linear(hidden_size, SIDES * taps * self.groups, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The identity: tap 0 is 1, every other tap 0, no token-dependent delta."""
        with torch.no_grad():
            self.base_kernel.zero_()
            self.base_kernel[:, 0].fill_(1.0)
            self.kernel_projection.weight.zero_()

    def convolve_input(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Convolve the sublayer's input; return it and the output side's delta."""
        projected = self.kernel_projection(x)
        deltas = projected.reshape(*x.shape[:-1], SIDES, self.taps, self.groups)
        out = grouped_causal_conv(
            x, deltas[..., INPUT_SIDE, :, :], self.base_kernel[INPUT_SIDE], self.block_size
        )
        return out, deltas[..., OUTPUT_SIDE, :, :]

    def convolve_output(self, y: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        """Convolve the sublayer's output with the delta computed from its input."""
        return grouped_causal_conv(y, delta, self.base_kernel[OUTPUT_SIDE], self.block_size)
