"""The one documented bound of every numeric input, wherever it enters (problem file, `--set`,
`--megatron-args`, hf_config, sweep sizes, `--time-limit`): the schema fields carry these bounds, so
every reader checks them before anything is sized from them. README "Bounds" lists them.
"""

from __future__ import annotations

MAX_GPUS = 1 << 20
"""Largest job (1,048,576 GPUs, ten times today's largest runs); also bounds TP, PP, CP, EP, ETP."""
MAX_LAYERS = 1 << 10
"""Most decoder blocks (1,024; the cut search keeps tables quadratic in it), MTP blocks, dense lead-in blocks, virtual stages, and blocks per stage."""
MAX_SEQ_LEN = 1 << 24
"""Longest sequence (16,777,216 tokens)."""
MAX_GLOBAL_BATCH = 1 << 24
"""Most sequences per optimizer step (16,777,216)."""
MAX_MICRO_BATCH = 1 << 16
"""Most sequences per micro-batch (65,536)."""
MAX_WIDTH = 1 << 20
"""Widest hidden, FFN, head, LoRA-rank or window size (1,048,576), and most attention heads."""
MAX_VOCAB = 1 << 24
"""Largest vocabulary (16,777,216 tokens)."""
MAX_EXPERTS = 1 << 16
"""Most routed experts per MoE layer (65,536)."""
MAX_FACTOR = 1024.0
"""Largest MoE capacity factor or dispatch headroom."""
MAX_WORKSPACE_GB = 1024.0
"""Largest per-GPU workspace reserve (GB)."""
MIN_TIME_LIMIT_S = 0.1
"""Shortest `--time-limit` (seconds)."""
MAX_TIME_LIMIT_S = 86_400.0
"""Longest `--time-limit` (one day); it must be finite."""
MAX_CHOICES = 64
"""Most values one degree (or the training-pool size) may list under `search:`."""
MAX_SWEEP_SIZES = 64
"""Most cluster sizes in one `sweep --gpus`."""
MAX_RESTRICTIONS = 1_000
"""Most `restrictions:` entries in one problem."""
MAX_EXPRESSION_CHARS = 2_000
"""Longest `--moe-layer-freq` or pipeline-layout text (a restriction has its own 500, constraints/rules/user.py)."""
MAX_NESTING = 64
"""Deepest nesting of brackets in an expression, or of lists/objects in a YAML or JSON input."""
MAX_INPUT_BYTES = 16 << 20
"""Largest file parasol reads (16 MiB): HF configs, launch scripts, runs files."""
MAX_PROBLEM_BYTES = 1 << 20
"""Largest problem file (1 MiB; the bundled ones are under 10 KB)."""
