"""Megatron-LM's enforcement stages: where in a launch a check raises (megatron-groups.md, 'Enforcement
stages'). Rules and launch-line warnings both name the stage."""

from __future__ import annotations

from enum import StrEnum


class MegatronStage(StrEnum):
    """Where Megatron-LM would raise (megatron-groups.md, 'Enforcement stages')."""

    arguments = "A: argument validation (validate_args)"
    global_vars = "G: global variables (num-microbatches calculator)"
    process_groups = "I: process groups (initialize_model_parallel)"
    config = "C: config objects (TransformerConfig.__post_init__)"
    model_build = "B: model build"
    runtime = "R: runtime (first forward/backward)"
    not_megatron = "-: not a Megatron check (hardware, seed or user rule)"
