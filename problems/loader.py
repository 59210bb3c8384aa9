"""Read a problem file: safe YAML with line numbers, schema validation, model and hardware resolution.

Every error names the file, the line, the field, the value, what was expected and a next step.
Nothing in a problem file is executed (yaml.SafeLoader only) and parasol never writes into it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from parasol.errors import InputError
from parasol.hardware.presets import HardwarePreset, hardware_from_spec
from parasol.problems.architecture import ModelArchitecture, architecture_from_dict
from parasol.problems.catalog import load_model
from parasol.problems.hf_config import architecture_from_hf_config
from parasol.problems.schema import ProblemFile

Path_ = tuple[str | int, ...]


@dataclass(frozen=True)
class Problem:
    """A validated problem with its model and hardware resolved."""

    source: str
    spec: ProblemFile
    model: ModelArchitecture
    hardware: HardwarePreset
    lines: dict[Path_, int]

    @property
    def gpus(self) -> int:
        return self.spec.hardware.gpus

    @property
    def training(self):  # noqa: ANN201 - pydantic Training
        return self.spec.training

    def line_of(self, *path: str | int) -> int | None:
        """Line of the deepest key of `path` present in the file (for citations and errors)."""
        return _line_for(self.lines, path)


class _LineLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (PyYAML silently keeps the last one)."""


def _compose(text: str, source: str) -> yaml.Node | None:
    try:
        return yaml.compose(text, Loader=_LineLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = mark.line + 1 if mark else None
        raise InputError(
            f"Not valid YAML: {exc.problem}.", file=source, line=line,
            fix="fix the YAML syntax at that line (indentation, a missing ':' or an unclosed quote).",
        ) from None
    except yaml.YAMLError as exc:
        raise InputError(f"Not valid YAML: {exc}.", file=source, fix="fix the YAML syntax.") from None


def _index_lines(node: yaml.Node, path: Path_, lines: dict[Path_, int], source: str) -> None:
    """Record the 1-based line of every key and list item; reject duplicate keys."""
    lines.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value
            line = key_node.start_mark.line + 1
            if key in seen:
                raise InputError(
                    f"Key `{key}` appears twice (first on line {seen[key]}).", file=source, line=line,
                    field=".".join(str(p) for p in (*path, key)), fix="keep one of the two entries.",
                )
            seen[key] = line
            lines[(*path, key)] = line
            _index_lines(value_node, (*path, key), lines, source)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[(*path, i)] = item.start_mark.line + 1
            _index_lines(item, (*path, i), lines, source)


def _line_for(lines: dict[Path_, int], path: Path_) -> int | None:
    for n in range(len(path), -1, -1):
        if tuple(path[:n]) in lines:
            return lines[tuple(path[:n])]
    return None


_EXPECTED = {
    "missing": "this required field",
    "extra_forbidden": "only known keys",
    "int_type": "a whole number",
    "int_parsing": "a whole number",
    "int_from_float": "a whole number",
    "float_type": "a number",
    "float_parsing": "a number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a text string",
    "dict_type": "a mapping of keys to values",
    "list_type": "a list",
    "tuple_type": "a list",
    "model_type": "a mapping of keys to values",
    "model_attributes_type": "a mapping of keys to values",
}


def _expected(err: dict) -> str:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        op = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}[kind]
        bound = next(iter(ctx.values()), "?")
        return f"a number {op} {bound}"
    if kind in ("enum", "literal_error"):
        return f"one of {ctx.get('expected', 'the listed values')}"
    if kind == "value_error":
        return "a consistent value"
    return _EXPECTED.get(kind, err["msg"].lower())


def _known_keys(model_cls: type[BaseModel], loc: Path_) -> list[str]:
    """Field names allowed at the mapping that holds `loc` (for 'did you mean')."""
    cls: Any = model_cls
    for part in loc[:-1]:
        field = getattr(cls, "model_fields", {}).get(part) if isinstance(part, str) else None
        if field is None:
            return []
        ann = field.annotation
        candidates = [a for a in getattr(ann, "__args__", (ann,)) if isinstance(a, type) and issubclass(a, BaseModel)]
        if not candidates:
            return []
        cls = candidates[0]
    return sorted(getattr(cls, "model_fields", {}))


def _clean_loc(loc: tuple) -> Path_:
    """Drop pydantic's union-branch tags (e.g. 'list[int]', 'function-after[...]') from a location."""
    return tuple(p for p in loc if isinstance(p, int) or ("[" not in p and p not in ("int", "str", "dict")))


def validation_error(exc: ValidationError, model_cls: type[BaseModel], lines: dict[Path_, int],
                     source: str, prefix: Path_ = ()) -> InputError:
    """Turn the first pydantic error into one InputError paragraph with file and line."""
    err = exc.errors()[0]
    loc = (*prefix, *_clean_loc(err["loc"]))
    field = ".".join(str(p) for p in loc) or "(top level)"
    value = err.get("input") if err["type"] != "missing" else None
    if isinstance(value, dict | list) and err["type"] != "extra_forbidden":
        value = None
    fix = f"set `{field}` to {_expected(err)}."
    detail = f"Invalid value for `{field}`: {err['msg']}."
    if err["type"] == "missing":
        detail = f"Missing required field `{field}`."
        fix = f"add `{loc[-1]}:` under `{'.'.join(str(p) for p in loc[:-1]) or 'the top level'}`."
    elif err["type"] == "extra_forbidden":
        known = _known_keys(model_cls, loc[len(prefix):])
        near = difflib.get_close_matches(str(loc[-1]), known, n=1)
        detail = f"Unknown key `{field}`."
        value = None
        fix = (f"did you mean `{near[0]}`? " if near else "") + (
            f"Remove it, or use one of: {', '.join(known)}." if known else "Remove it."
        )
    return InputError(detail, field=field, value=value, expected=_expected(err), fix=fix,
                      file=source, line=_line_for(lines, loc))


def resolve_model(spec: str | dict, base_dir: Path, lines: dict[Path_, int], source: str) -> ModelArchitecture:
    """A catalog name, {catalog: name} with overrides, {hf_config: path}, or an inline architecture."""
    line = _line_for(lines, ("model",))
    try:
        if isinstance(spec, str):
            return load_model(spec)
        if "hf_config" in spec:
            extra = sorted(set(spec) - {"hf_config"})
            if extra:
                raise InputError(f"`model.hf_config` cannot be combined with {extra}.", field="model",
                                 fix="give only `hf_config: path/to/config.json`.")
            path = Path(str(spec["hf_config"]))
            return architecture_from_hf_config(path if path.is_absolute() else base_dir / path)
        if "catalog" in spec:
            base = load_model(str(spec["catalog"])).model_dump(mode="json")
            base.update({k: v for k, v in spec.items() if k != "catalog"})
            return architecture_from_dict(base)
        return architecture_from_dict(spec)
    except InputError as exc:
        raise _attach(exc, source, line) from None


def _attach(exc: InputError, source: str, line: int | None) -> InputError:
    if exc.file is None:
        exc.file, exc.line = source, line
        exc.args = (exc.render(),)
    return exc


def load_problem_text(text: str, source: str = "<problem>", base_dir: Path | None = None) -> Problem:
    """Validate problem YAML text and resolve its model and hardware."""
    root = _compose(text, source)
    if root is None:
        raise InputError("The problem file is empty.", file=source,
                         fix="start from a bundled problem, e.g. problems/deepseek-v4-pro-1024.yaml.")
    if not isinstance(root, yaml.MappingNode):
        raise InputError("A problem file must be a mapping of sections (model, training, hardware, ...).",
                         file=source, line=root.start_mark.line + 1,
                         fix="start from a bundled problem, e.g. problems/deepseek-v4-pro-1024.yaml.")
    lines: dict[Path_, int] = {}
    _index_lines(root, (), lines, source)
    data = yaml.load(text, Loader=yaml.SafeLoader)
    try:
        spec = ProblemFile.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, ProblemFile, lines, source) from None
    model = resolve_model(spec.model, base_dir or Path.cwd(), lines, source)
    hw_spec: dict = {k: v for k, v in (("preset", spec.hardware.preset), ("gpu", spec.hardware.gpu),
                                       ("topology", spec.hardware.topology)) if v is not None}
    try:
        hardware = hardware_from_spec(hw_spec)
        hardware.topology.validate_gpu_count(spec.hardware.gpus)
    except InputError as exc:
        where = ("hardware", "gpus") if "gpus" in str(exc.field) else ("hardware",)
        raise _attach(exc, source, _line_for(lines, where)) from None
    return Problem(source=source, spec=spec, model=model, hardware=hardware, lines=lines)


def load_problem(path: str | Path) -> Problem:
    """Read and validate a problem file from disk."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"No problem file at {str(p)!r}.", fix="check the path; bundled problems are in problems/.")
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"Cannot read {str(p)!r}: {exc}.", fix="give a readable UTF-8 YAML file.") from None
    return load_problem_text(text, source=str(p), base_dir=p.parent)
