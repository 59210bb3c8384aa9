"""What the launch-line readers share while they read one command: its flags, the notes and warnings
collected, the parsed hybrid pattern and the problem's model to compare with."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from parasol.problems.megatron.flags import Flags
from parasol.problems.megatron.patterns import HybridPattern
from parasol.problems.megatron.stages import MegatronStage
from parasol.problems.model.architecture import ModelArchitecture


@dataclass(frozen=True)
class LaunchWarning:
    """A flag Megatron rewrites or has deprecated, or a default parasol had to assume."""

    flag: str
    message: str
    source: str
    stage: MegatronStage = MegatronStage.arguments

    def as_dict(self) -> dict:
        """The shape of `explain --json` warnings, under the rule id `megatron-args`."""
        return {"rule": "megatron-args", "flag": self.flag, "message": self.message, "source": self.source,
                "stage": self.stage.value}


@dataclass
class Context:
    """What the mappers share: the flags, notes and warnings collected, and the reference model."""

    flags: Flags
    reference: ModelArchitecture | None
    notes: list[str] = dataclasses.field(default_factory=list)
    warnings: list[LaunchWarning] = dataclasses.field(default_factory=list)
    pattern: HybridPattern | None = None
    moe_layer_recompute: bool = False

