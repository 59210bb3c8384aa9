"""Bytes per value of the number formats training moves and stores."""

from __future__ import annotations

BF16_BYTES = 2
"""BF16 (and FP16): weights, activations, most communication."""
FP32_BYTES = 4
"""FP32: master weights, optimizer state, gradient buffers, router logits, loss softmax."""
FP8_BYTES = 1
"""FP8 (E4M3/E5M2): low-precision GEMM inputs and published rollout weights."""
