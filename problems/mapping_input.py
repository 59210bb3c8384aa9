"""Build the mapping to judge from a problem's defaults, its `mapping:` section and `--set k=v` flags."""

from __future__ import annotations

import dataclasses

from pydantic import ValidationError

from parasol.bounds import MAX_LAYERS
from parasol.errors import InputError, short
from parasol.problems.loader import Problem
from parasol.problems.mapping import MAPPING_KEYS, Mapping, RankOrder
from parasol.problems.options import MegatronOptions
from parasol.problems.schema import Training

TRAINING_SET_KEYS = ("fsdp", "distributed_optimizer", "sequence_parallel", "recompute_modules", "frozen_base_weights",
                     "pipeline_schedule")
"""Training fields `--set` may change (the run's sharding and memory-saving choices)."""
SETTING_KEYS = (*TRAINING_SET_KEYS, *MegatronOptions.model_fields)
"""Keys `--set` accepts besides the mapping's: training fields and every framework option by its name
(e.g. --set overlap_grad_reduce=false, --set fsdp=megatron-fsdp, --set offload_modules=core_attn,moe_act)."""


def parse_layout(text: str) -> tuple[int, ...]:
    """Comma-separated stage layer counts, e.g. '7,8,8,8,8,8,7,7'."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(p.isdigit() and len(p) <= len(str(MAX_LAYERS)) for p in parts):
        raise InputError(
            f"Cannot read layout {short(text)}.", field="layout", value=text,
            expected=f"comma-separated whole numbers (at most {MAX_LAYERS:,}) of blocks per stage, e.g. 7,8,8,8,8,8,7,7",
            fix="give one count per pipeline stage (PP·VPP of them, in Megatron's virtual-stage order).",
        )
    return tuple(int(p) for p in parts)


def parse_sets(items: tuple[str, ...]) -> dict[str, str]:
    """Split `k=v` flags, rejecting unknown keys and repeats."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        if not sep or not value.strip():
            raise InputError(f"Cannot read --set {item!r}.", field="--set", value=item,
                             expected="key=value, e.g. --set tp=1", fix="write each setting as key=value.")
        if key not in MAPPING_KEYS and key not in SETTING_KEYS:
            raise InputError(f"Unknown --set key {key!r}.", field="--set", value=item,
                             expected=f"one of {', '.join(MAPPING_KEYS)}, or a training setting "
                                      f"({', '.join(TRAINING_SET_KEYS)}) or framework option name",
                             fix="use one of the listed keys.")
        if key in out:
            raise InputError(f"--set {key} is given twice.", field="--set", value=item,
                             fix=f"keep one --set {key}=….")
        out[key] = value.strip()
    return out


def base_mapping(problem: Problem) -> dict:
    """The mapping fields a problem implies before any --set: run sizes plus its `mapping:` section."""
    spec = problem.spec
    data: dict = {
        "gpus": problem.gpus,
        "gbs": spec.training.global_batch,
        "seq_len": spec.training.seq_len,
        "mbs": spec.training.micro_batch or 1,
        "recompute": spec.training.recompute,
        "rank_order": RankOrder.dp_last if spec.framework.options.use_tp_pp_dp_mapping else RankOrder.pp_last,
    }
    if spec.mapping is not None:
        for key, value in spec.mapping.model_dump(exclude_none=True).items():
            data[key] = parse_layout(value) if key == "layout" and isinstance(value, str) else value
    return data


def _whole_range(err: dict) -> str:
    """'a whole number from 1 to N' with the field's own bound (parasol/bounds.py) when it has one."""
    upper = (err.get("ctx") or {}).get("le")
    return f"a whole number from 1 to {upper:,}" if isinstance(upper, int) else "a positive whole number"


def build_mapping(problem: Problem, overrides: dict[str, object]) -> Mapping:
    """Problem defaults overridden by `overrides` (--set text or a launch line's typed values), validated
    as a Mapping."""
    data = base_mapping(problem)
    for key, value in overrides.items():
        data[key] = parse_layout(value) if key == "layout" and isinstance(value, str) else value
    try:
        mapping = Mapping.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = str(err["loc"][0]) if err["loc"] else "mapping"
        expected = {"recompute": "one of none, selective, full",
                    "layout": "comma-separated whole numbers of blocks per stage",
                    "rank_order": f"one of {', '.join(o.value for o in RankOrder)}"}.get(key, _whole_range(err))
        raise InputError(
            f"Invalid mapping value for `{key}`: {err['msg']}.", field=key, value=data.get(key),
            expected=expected, fix=f"correct --set {key}=… (or the problem's mapping.{key}).",
            **_where(problem, key, overrides),
        ) from None
    return mapping


PROBLEM_KEYS = {"gpus": ("hardware", "gpus"), "gbs": ("training", "global_batch"), "seq_len": ("training", "seq_len")}
"""Where a mapping field comes from in the problem file when it is not in its `mapping:` section."""


def _where(problem: Problem, key: str, overrides: dict[str, object]) -> dict:
    """file and line of a mapping field the problem file set (nothing when --set or a launch line did)."""
    if key in overrides or not problem.lines:
        return {}
    if problem.spec.mapping is not None and key in problem.spec.mapping.model_fields_set:
        path: tuple[str, ...] = ("mapping", key)
    else:
        path = PROBLEM_KEYS.get(key, ("mapping", key))
    return {"file": problem.source, "line": problem.line_of(*path)}


def split_sets(sets: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(mapping keys, training/option keys) of parsed --set pins."""
    mapping = {k: v for k, v in sets.items() if k in MAPPING_KEYS}
    return mapping, {k: v for k, v in sets.items() if k not in MAPPING_KEYS}


def _setting_value(model: type, key: str, text: str) -> object:
    """A --set text as the field wants it: comma lists for tuple fields, 'none' for an unset choice."""
    annotation = str(model.model_fields[key].annotation)
    if "tuple" in annotation:
        return tuple(p.strip() for p in text.split(",") if p.strip())
    if text.lower() in ("none", "null") and "None" in annotation:
        return None
    return text


def apply_settings(problem: Problem, settings: dict[str, str]) -> Problem:
    """The problem with --set's training fields and framework options replaced, validated as the
    problem file's would be (what the file left unset stays unset); a bad value names the key."""
    if not settings:
        return problem
    spec = problem.spec
    training = spec.training.model_dump(include=spec.training.model_fields_set)
    options = spec.framework.options.model_dump(include=spec.framework.options.model_fields_set)
    for key, text in settings.items():
        if key in TRAINING_SET_KEYS:
            training[key] = _setting_value(Training, key, text)
        else:
            options[key] = _setting_value(MegatronOptions, key, text)
    try:
        new_training = Training.model_validate(training)
        new_options = MegatronOptions.model_validate(options)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = str(err["loc"][0]) if err["loc"] else "--set"
        raise InputError(f"Invalid --set {key}: {err['msg']}.", field=key, value=settings.get(key),
                         fix=f"correct --set {key}=… (see the training and framework.options fields).") from None
    framework = spec.framework.model_copy(update={"options": new_options})
    new_spec = spec.model_copy(update={"training": new_training, "framework": framework})
    return dataclasses.replace(problem, spec=new_spec)
