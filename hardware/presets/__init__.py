"""Hardware presets (GPU + topology) bundled as YAML, and hardware built from a problem's spec.

The YAML files live in this package's folder; the code lives here in `__init__` because a module
`hardware/presets.py` would be shadowed by this package of the same import name.

A problem names its cluster as a preset (`h100-hgx`), a preset plus overrides that are deep-merged
onto it (`{preset: h100-hgx, topology: {spine_oversubscription: 4}}`), or fully inline
(`{gpu: {...}, topology: {...}}`). Every figure in a preset file cites its source in a comment.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from parasol.errors import CatalogError, InputError
from parasol.files import bundled_yaml
from parasol.hardware.gpu import GPUSpec
from parasol.hardware.topology import ClusterTopology

PRESET_PACKAGE = __name__


class HardwarePreset(BaseModel):
    """A cluster type: one accelerator and the topology it sits in (the job size is the problem's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(default="inline", description="preset name; '<preset>+overrides' when overridden")
    description: str = Field(default="", description="one line on what this cluster is")
    gpu: GPUSpec
    topology: ClusterTopology
    sources: tuple[str, ...] = Field(default=(), description="where the figures come from")


def preset_names() -> list[str]:
    """Names of the bundled presets (their YAML file stems), sorted."""
    files = resources.files(PRESET_PACKAGE).iterdir()
    return sorted(f.name.removesuffix(".yaml") for f in files if f.name.endswith(".yaml"))


def load_preset(name: str) -> HardwarePreset:
    """Read one bundled preset by name; unknown names raise CatalogError listing the known ones."""
    names = preset_names()
    if not isinstance(name, str) or name not in names:
        close = difflib.get_close_matches(name, names, n=1) if isinstance(name, str) else []
        raise CatalogError(
            f"Unknown hardware preset {name!r}.",
            field="hardware.preset",
            value=name,
            expected="one of " + ", ".join(names),
            fix=f"use one of those names{f' (closest: {close[0]!r})' if close else ''}, or describe the "
            "cluster inline with hardware.gpu and hardware.topology.",
        )
    return _read_preset(name)


@cache
def _read_preset(name: str) -> HardwarePreset:
    """Parse and validate a bundled preset file once per process."""
    text = resources.files(PRESET_PACKAGE).joinpath(f"{name}.yaml").read_text(encoding="utf-8")
    return _validate({**bundled_yaml(text), "name": name}, file=f"{name}.yaml")


def hardware_from_spec(spec: Mapping[str, Any] | str) -> HardwarePreset:
    """Build hardware from a preset name, a preset plus deep-merged overrides, or an inline block."""
    if isinstance(spec, str):
        return load_preset(spec)
    if not isinstance(spec, Mapping):
        raise InputError(
            "The hardware section must be a preset name or a mapping.",
            field="hardware",
            value=spec,
            expected="a preset name, or a mapping with `preset` and/or `gpu` and `topology`",
            fix=f"write e.g. `hardware: {{preset: h100-hgx, gpus: 1024}}`; presets: {', '.join(preset_names())}.",
        )
    overrides = {k: v for k, v in spec.items() if k != "preset"}
    if "preset" not in spec:
        return _validate(overrides)
    base = load_preset(spec["preset"]).model_dump()
    if overrides and "name" not in overrides:
        overrides["name"] = f"{spec['preset']}+overrides"
    return _validate(_deep_merge(base, overrides))


def _deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Override wins key by key; nested mappings merge instead of being replaced whole."""
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _validate(data: Any, file: str | None = None) -> HardwarePreset:
    """Validate a hardware mapping, turning pydantic's report into one InputError that names the field."""
    try:
        return HardwarePreset.model_validate(data)
    except ValidationError as exc:
        raise _input_error(exc, file) from None


def _input_error(exc: ValidationError, file: str | None) -> InputError:
    """The first validation problem as an InputError: field path, value, rule and a next step."""
    errors = exc.errors()
    first = errors[0]
    loc = tuple(str(part) for part in first["loc"])
    field = ".".join(("hardware", *loc))
    cause = first.get("ctx", {}).get("error")
    rule = str(cause) if cause is not None else first["msg"]
    value = first.get("input")
    more = f" ({len(errors) - 1} more problem(s) after this one)" if len(errors) > 1 else ""
    if first["type"] == "extra_forbidden":
        fix = f"remove `{field}`; allowed keys here: {', '.join(_allowed_keys(loc[:-1]))}."
    elif first["type"] == "missing":
        fix = f"add `{field}`."
    elif cause is not None:
        fix = f"change the values in `{field}` so that this holds."
    else:
        fix = f"correct `{field}`."
    return InputError(
        f"Invalid hardware description: {rule}{more}.",
        field=field,
        value=None if first["type"] == "missing" or isinstance(value, Mapping) else value,
        fix=fix,
        file=file,
    )


def _allowed_keys(loc: tuple[str, ...]) -> list[str]:
    """Field names of the model found at a location inside HardwarePreset."""
    model: type[BaseModel] = HardwarePreset
    for part in loc:
        annotation = model.model_fields[part].annotation
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            break
        model = annotation
    return list(model.model_fields)
