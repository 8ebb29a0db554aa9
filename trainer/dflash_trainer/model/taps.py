"""Target taps: forward hooks that keep only the tapped layers' outputs.

Layer id i is the output of decoder layer i (HF `hidden_states[i + 1]`). Only the tapped
tensors are kept (never all L+1 hidden states), and when logits are not needed the forward
stops right after the last tapped layer, skipping the remaining layers and the LM head.
Sequences are right-padded, never packed: with causal attention and causal Gated-DeltaNet
recurrences, padding after a sample cannot change that sample's states.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from dflash_trainer.model.target import TargetParts


class _StopForwardError(Exception):
    """Raised by the last tap's hook to end the target forward early."""


class TargetTaps:
    """Capture `[b, S, len(layer_ids) * H]` features from a frozen target."""

    def __init__(self, target: TargetParts, layer_ids: Sequence[int]) -> None:
        bad = [i for i in layer_ids if not 0 <= i < target.num_layers]
        if bad:
            raise ValueError(
                f"drafter.target_layer_ids contains {bad}; accepted: 0..{target.num_layers - 1}"
            )
        self.target = target
        self.layer_ids = list(layer_ids)
        self._captured: dict[int, torch.Tensor] = {}
        self._stop_early = False
        self._last = max(self.layer_ids)
        self._handles = [
            target.layers[i].register_forward_hook(self._hook(i)) for i in sorted(set(layer_ids))
        ]

    def _hook(self, layer_id: int) -> Any:
        def hook(_module: nn.Module, _args: Any, output: Any) -> None:
            hidden = output[0] if isinstance(output, tuple) else output
            self._captured[layer_id] = hidden
            if self._stop_early and layer_id == self._last:
                raise _StopForwardError

        return hook

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _collect(self) -> torch.Tensor:
        try:
            return torch.cat([self._captured[i] for i in self.layer_ids], dim=-1)
        finally:
            self._captured = {}

    @torch.no_grad()
    def features(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Tapped features only: the forward stops after the last tapped layer."""
        self._stop_early = True
        try:
            self.target.decoder(input_ids=input_ids, use_cache=False)
        except _StopForwardError:
            pass
        finally:
            self._stop_early = False
        return self._collect()

    @torch.no_grad()
    def features_and_hidden(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Tapped features and the decoder's final hidden states (the whole forward, without
        the LM head): the likelihood monitor scores the supervised positions from them."""
        hidden = self.target.decoder(input_ids=input_ids, use_cache=False).last_hidden_state
        return self._collect(), hidden

    @torch.no_grad()
    def features_and_logits(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Tapped features and the target's logits (the full forward; for verification)."""
        logits = self.target.model(input_ids=input_ids, use_cache=False).logits
        return self._collect(), logits
