"""Megatron's argument checks on fully sharded data parallelism (`training.fsdp`).

Torch FSDP2 (--use-torch-fsdp2) shards whole modules over every rank of the job: Megatron refuses it with
pipeline or expert parallelism and with the embedding tied to the output layer. Either FSDP takes only
the Adam and SGD optimizers (Megatron-FSDP's own check, and the emerging optimizers' such as Muon). The
flags those checks read besides (no distributed optimizer and no gradient-accumulation fusion under FSDP2,
the checkpoint format, the CUDA_DEVICE_MAX_CONNECTIONS environment) are the launch script's:
solver/outputs/emit.py writes them as each FSDP needs.

Source: Megatron-LM main@d98e8a64 megatron/training/arguments.py:1031-1049, 1150-1151 and 1726-1740.
"""

from __future__ import annotations

from parasol.constraints.core.base import ARGUMENTS, Citation, Constraint, Facts, Family
from parasol.problems.megatron.stages import MegatronStage
from parasol.problems.schema import Optimizer


class _UnderTorchFsdp2(Constraint):
    """A check of Megatron's under torch FSDP2: in force, and posted, only when the problem runs it."""

    family = Family.feature
    exact = True

    def applies(self, problem) -> bool:
        return problem.training.fsdp == "torch-fsdp2"

    def in_force(self, f: Facts) -> bool:
        return self.applies(f.problem)

    @staticmethod
    def _posted(v) -> bool:  # noqa: ANN001 - DecisionVars
        """Whether the CP-SAT side's problem runs torch FSDP2 (consts' torch_fsdp2)."""
        return bool(v.consts["torch_fsdp2"])


class _TorchFsdp2Degree(_UnderTorchFsdp2):
    """Under torch FSDP2 a parallel degree Megatron does not combine with it must be 1."""

    unit = "ranks"
    degree = ""
    label = ""
    what = ""

    def slack(self, f: Facts) -> float:
        return float(1 - getattr(f.mapping, self.degree)) if self.in_force(f) else 0.0

    def message(self, f: Facts) -> str:
        value = getattr(f.mapping, self.degree)
        if not self.in_force(f):
            return "no torch FSDP2"
        if self.slack(f) >= 0:
            return f"{self.label} {value}: no {self.what}, as torch FSDP2 needs"
        return (f"--use-torch-fsdp2 is not supported with {self.what} ({self.label} {value}): use {self.label} 1, "
                "or Megatron-FSDP (training.fsdp: megatron-fsdp)")

    def post(self, model, v, enforce) -> None:
        if self._posted(v):
            model.Add(getattr(v, self.degree) == 1).OnlyEnforceIf(enforce)


class TorchFsdp2NoPipeline(_TorchFsdp2Degree):
    id = "torch-fsdp2-no-pp"
    citation = Citation(f"{ARGUMENTS}:1034-1035", MegatronStage.arguments)
    summary = "use_torch_fsdp2 -> PP == 1"
    degree, label, what = "pp", "PP", "pipeline parallelism"


class TorchFsdp2NoExpertParallel(_TorchFsdp2Degree):
    id = "torch-fsdp2-no-ep"
    citation = Citation(f"{ARGUMENTS}:1036-1037", MegatronStage.arguments)
    summary = "use_torch_fsdp2 -> EP == 1"
    degree, label, what = "ep", "EP", "expert parallelism"


class TorchFsdp2UntiedEmbeddings(_UnderTorchFsdp2):
    """Torch FSDP2 needs the output layer's weights apart from the input embedding's."""

    id = "torch-fsdp2-untied-embeddings"
    citation = Citation(f"{ARGUMENTS}:1044-1045", MegatronStage.arguments)
    unit = "settings"
    summary = "use_torch_fsdp2 -> untie_embeddings_and_output_weights"

    def slack(self, f: Facts) -> float:
        return -1.0 if self.in_force(f) and f.model.tied_embeddings else 0.0

    def message(self, f: Facts) -> str:
        if self.slack(f) < 0:
            return (f"--use-torch-fsdp2 requires --untie-embeddings-and-output-weights: {f.model.name} ties its "
                    "output layer to the embedding; use Megatron-FSDP (training.fsdp: megatron-fsdp)")
        if not self.in_force(f):
            return "no torch FSDP2"
        return "the model's output layer is untied from the embedding, as torch FSDP2 needs"

    def post(self, model, v, enforce) -> None:
        if self._posted(v) and v.consts["tied_embeddings"]:
            model.AddBoolOr([enforce.Not()])


class FsdpOptimizer(Constraint):
    """Both FSDPs shard the optimizer state of Adam and SGD only: Megatron-FSDP says so itself, and an
    emerging optimizer (Muon) refuses either FSDP."""

    id = "fsdp-adam-or-sgd"
    family = Family.feature
    citation = Citation(f"{ARGUMENTS}:1150-1151,1726,1739-1740", MegatronStage.arguments)
    unit = "settings"
    summary = "use_megatron_fsdp or use_torch_fsdp2 -> optimizer in {adam, sgd}"
    exact = True

    def applies(self, problem) -> bool:
        return problem.training.fsdp != "none"

    def in_force(self, f: Facts) -> bool:
        return self.applies(f.problem)

    def slack(self, f: Facts) -> float:
        return -1.0 if self.in_force(f) and f.problem.training.optimizer is not Optimizer.adam else 0.0

    def message(self, f: Facts) -> str:
        training = f.problem.training
        if not self.in_force(f):
            return "no FSDP"
        if self.slack(f) == 0:
            return f"{training.fsdp} runs the {training.optimizer.value} optimizer"
        return (f"{training.fsdp} does not support the {training.optimizer.value} optimizer yet: use adam, or the "
                "distributed optimizer without FSDP (training.fsdp: none)")

    def post(self, model, v, enforce) -> None:
        if (v.consts["torch_fsdp2"] or v.consts["megatron_fsdp"]) and not v.consts["optimizer_adam"]:
            model.AddBoolOr([enforce.Not()])

