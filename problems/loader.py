"""Read a problem file: safe YAML with line numbers, schema validation, model and hardware resolution.

Every error names the file, the line, the field, the value, what was expected and a next step.
Nothing in a problem file is executed: YAML tags other than plain data are rejected before anything
is constructed (yaml.SafeLoader only), and parasol never writes into the file.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from parasol.bounds import MAX_PROBLEM_BYTES
from parasol.errors import CatalogError, InputError, dotted, validation_input_error
from parasol.files import read_input_bytes
from parasol.hardware.presets import HardwarePreset, hardware_from_spec
from parasol.problems.memo import memoised
from parasol.problems.model.architecture import ModelArchitecture, architecture_from_dict
from parasol.problems.model.catalog import load_model
from parasol.problems.schema import ProblemFile

Path_ = tuple[str | int, ...]

EXAMPLE = "problems/deepseek-v4-pro-1024.yaml"
MAX_DEPTH = 32
"""Deepest nesting a problem file may have (the schema itself needs 5 levels)."""

_YAML_TAG = "tag:yaml.org,2002:"
_PLAIN_TAGS = {_YAML_TAG + t for t in ("null", "bool", "int", "float", "str", "seq", "map", "timestamp", "merge")}
_KEY_KINDS = {"null": "an empty key (null)", "bool": "true/false", "int": "a number", "float": "a number",
              "timestamp": "a date"}


@dataclass(frozen=True)
class Problem:
    """A validated problem with its model and hardware resolved."""

    source: str
    spec: ProblemFile
    model: ModelArchitecture
    cluster: HardwarePreset
    """The cluster as described (whole nodes); `hardware` is it as the job's ranks see it."""
    lines: dict[Path_, int]

    @property
    def gpus(self) -> int:
        return self.spec.hardware.gpus

    @property
    def hardware(self) -> HardwarePreset:
        """The cluster with the job's rank layout (hardware/topology.py for_job): partial nodes hold fewer
        ranks; built once per problem."""
        def build() -> HardwarePreset:
            topology = self.cluster.topology.for_job(self.gpus, self.spec.hardware.ranks_per_node)
            return self.cluster if topology is self.cluster.topology else self.cluster.model_copy(
                update={"topology": topology})
        return memoised(self, "job_hardware", build)

    @property
    def training(self):  # noqa: ANN201 - pydantic Training
        return self.spec.training

    def line_of(self, *path: str | int) -> int | None:
        """Line of the deepest key of `path` present in the file (for citations and errors)."""
        return _line_for(self.lines, path)

    def resized(self, gpus: int, global_batch: int | None = None) -> Problem:
        """The same problem on `gpus` GPUs (placed by the topology's rank layout, its ranks per node
        re-chosen), with `global_batch` sequences per step when given; the search's own size choices are
        dropped."""
        self.cluster.topology.validate_gpu_count(gpus)
        spec = self.spec
        training = spec.training if global_batch is None else spec.training.model_copy(
            update={"global_batch": global_batch})
        spec = spec.model_copy(update={"hardware": spec.hardware.model_copy(update={"gpus": gpus, "ranks_per_node": None}),
                                       "training": training,
                                       "search": spec.search.model_copy(update={"gpus": None})})
        return dataclasses.replace(self, spec=spec)


# --- YAML: syntax, plain data only, line of every key -------------------------------------------


def _key_path_at(text: str, line: int) -> str | None:
    """The dotted key path a line sits under, read from indentation (for YAML that does not parse)."""
    rows = text.splitlines()[:line]
    path: list[str] = []
    limit = None
    for row in reversed(rows):
        match = re.match(r"^([ \t]*)([A-Za-z_][\w.-]*)[ \t]*:(.*)$", row)
        if not match:
            continue
        indent, key, rest = len(match[1]), match[2], match[3].split("#")[0].strip()
        if limit is None or (indent < limit and not rest):
            path.insert(0, key)
            limit = indent
        if limit == 0:
            break
    return ".".join(path) or None


def _syntax_words(exc: yaml.MarkedYAMLError) -> str:
    """PyYAML's complaint in the words of someone editing the file."""
    problem = exc.problem or "unreadable YAML"
    context = exc.context or ""
    if "'\\t'" in problem:
        return "a tab character; YAML indents with spaces only"
    if "end of stream" in problem and "quoted" in context:
        return "a quote that is never closed"
    if "expected <block end>" in problem or "expected <block mapping start>" in problem:
        return "the indentation does not line up with the keys around it"
    if "mapping values are not allowed" in problem:
        return "a ':' where a value was expected (quote text that contains ': ')"
    if "could not find expected ':'" in problem:
        return "a key without ':' after it"
    if "flow sequence" in context:
        return "a `[` list that is not closed by `]` (or a ':' inside it)"
    if "flow mapping" in context:
        return "a `{` mapping that is not closed by `}` (or a missing ',' inside it)"
    return f"{problem}" + (f" ({context})" if context else "")


def _syntax_error(exc: yaml.MarkedYAMLError, text: str, source: str) -> InputError:
    """A YAML syntax error at the line a user should look at (where an unclosed quote opened)."""
    mark = exc.problem_mark
    context = exc.context or ""
    if exc.context_mark is not None and ("quoted" in context or "flow" in context):
        mark = exc.context_mark
    line = mark.line + 1 if mark else None
    where = f" at column {mark.column + 1}" if mark else ""
    return InputError(
        f"Not valid YAML{where}: {_syntax_words(exc)}.", field=_key_path_at(text, line) if line else None,
        file=source, line=line, expected="`key: value` lines, nested by indenting with spaces",
        fix="fix the YAML at that line (indentation, a missing ':' or an unclosed quote).",
    )


def _reader_error(exc: yaml.reader.ReaderError, text: str, source: str) -> InputError:
    """A character YAML refuses (control characters), with its line."""
    line = text[: max(exc.position, 0)].count("\n") + 1
    code = exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1] or "\0")
    return InputError(
        f"The file holds the control character U+{code:04X}, which YAML does not allow.",
        file=source, line=line, expected="plain text", fix="delete that character (or re-save the file as text).",
    )


def _tag_words(tag: str) -> str:
    return "!!" + tag.removeprefix(_YAML_TAG) if tag.startswith(_YAML_TAG) else tag


def _check_key(key_node: yaml.Node, path: Path_, source: str) -> str:
    """A mapping key must be a plain name (YAML reads `1:`, `on:` or `~:` as other things)."""
    line = key_node.start_mark.line + 1
    if not isinstance(key_node, yaml.ScalarNode):
        raise InputError("A key must be a name, not a list or mapping.", field=dotted(path) or None, file=source,
                         line=line, expected="a name such as `seq_len`", fix="write the key as a plain name.")
    kind = key_node.tag.removeprefix(_YAML_TAG)
    if kind != "str" and key_node.tag != _YAML_TAG + "merge":
        raise InputError(
            f"The key {key_node.value!r} is read by YAML as {_KEY_KINDS.get(kind, kind)}, not as a name.",
            field=dotted((*path, key_node.value)), file=source, line=line, expected="a name such as `seq_len`",
            fix=f"use a known key, or quote it (\"{key_node.value}\") if you mean the text.",
        )
    return key_node.value


def _index_lines(node: yaml.Node, path: Path_, lines: dict[Path_, int], source: str,
                 seen_nodes: set[int] | None = None) -> None:
    """Record the 1-based line of every key and list item, before anything is constructed; reject
    YAML tags that are not plain data, keys that are not names, duplicate keys and deep nesting."""
    seen_nodes = set() if seen_nodes is None else seen_nodes
    if id(node) in seen_nodes:
        return
    seen_nodes.add(id(node))
    line = node.start_mark.line + 1
    lines.setdefault(path, line)
    if node.tag not in _PLAIN_TAGS:
        raise InputError(
            f"The YAML tag `{_tag_words(node.tag)}` is not allowed: a problem file holds plain data "
            "(text, numbers, true/false, lists and mappings) and parasol never builds objects or runs code from it.",
            field=dotted(path) or None, file=source, line=line, expected="a plain value",
            fix="remove the tag and write the plain value.",
        )
    if len(path) > MAX_DEPTH:
        raise InputError(f"The file nests more than {MAX_DEPTH} levels deep.", field=dotted(path), file=source,
                         line=line, fix=f"start from a bundled problem, e.g. {EXAMPLE}.")
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = _check_key(key_node, path, source)
            if key_node.tag == _YAML_TAG + "merge":
                _index_lines(value_node, path, lines, source, seen_nodes)
                continue
            key_line = key_node.start_mark.line + 1
            if key in seen:
                raise InputError(
                    f"Key `{key}` appears twice (first on line {seen[key]}).", file=source, line=key_line,
                    field=dotted((*path, key)), fix="keep one of the two entries.",
                )
            seen[key] = key_line
            lines[(*path, key)] = key_line
            _index_lines(value_node, (*path, key), lines, source, seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            lines[(*path, i)] = item.start_mark.line + 1
            _index_lines(item, (*path, i), lines, source, seen_nodes)


def _read_yaml(text: str, source: str) -> tuple[Any, dict[Path_, int]]:
    """One YAML document as plain data, and the line of every key; syntax errors name their line."""
    lines: dict[Path_, int] = {}
    loader = None
    try:
        loader = yaml.SafeLoader(text)
        root = loader.get_single_node()
        if root is None:
            return None, lines
        if not isinstance(root, yaml.MappingNode):
            raise InputError(
                f"A problem file must be a mapping of sections (model, training, hardware, ...), not "
                f"{'a list' if isinstance(root, yaml.SequenceNode) else 'a single value'}.",
                file=source, line=root.start_mark.line + 1, expected="`model:`, `training:` and `hardware:` sections",
                fix=f"start from a bundled problem, e.g. {EXAMPLE}.")
        _index_lines(root, (), lines, source)
        return loader.construct_document(root), lines
    except yaml.MarkedYAMLError as exc:
        raise _syntax_error(exc, text, source) from None
    except yaml.reader.ReaderError as exc:
        raise _reader_error(exc, text, source) from None
    except yaml.YAMLError as exc:
        raise InputError(f"Not valid YAML: {exc}.", file=source, fix="fix the YAML syntax.") from None
    except RecursionError:
        raise InputError("The file nests too deeply to read.", file=source,
                         fix=f"start from a bundled problem, e.g. {EXAMPLE}.") from None
    finally:
        if loader is not None:
            loader.dispose()


def _line_for(lines: dict[Path_, int], path: Path_) -> int | None:
    """Line of the deepest part of `path` present in the file (a missing key: its parent's line)."""
    for n in range(len(path), -1, -1):
        if tuple(path[:n]) in lines:
            return lines[tuple(path[:n])]
    return None


def _field_path(field: str | None) -> Path_:
    """A dotted field name back as a location (`model.moe.top_k` → ('model', 'moe', 'top_k'))."""
    return tuple(int(p) if p.isdigit() else p for p in (field or "").split(".") if p)


def validation_error(exc: ValidationError, model_cls: type[BaseModel], lines: dict[Path_, int],
                     source: str, prefix: Path_ = (), data: Any = None) -> InputError:
    """The first problem pydantic found, as one InputError with the file and the line of the field."""
    return validation_input_error(exc, model_cls, data, prefix=prefix, file=source,
                                  line_of=lambda loc: _line_for(lines, loc))


# --- the model: catalog name, catalog plus overrides, HuggingFace config, or inline --------------


def _merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Overrides win key by key; nested mappings merge, unless they switch `kind` (then they replace)."""
    merged = dict(base)
    for key, value in override.items():
        old = merged.get(key)
        nested = isinstance(old, Mapping) and isinstance(value, Mapping)
        merged[key] = _merge(old, value) if nested and value.get("kind", old.get("kind")) == old.get("kind") else value
    return merged


def _hf_model(spec: Mapping[str, Any], base_dir: Path) -> ModelArchitecture:
    """`{hf_config: path, name: optional}`: a HuggingFace config.json, relative to the problem file's folder
    (its reader is imported here, so that problems naming a catalog model load without it)."""
    from parasol.problems.model.hf_config import architecture_from_hf_config

    extra = sorted(set(spec) - {"hf_config", "name"})
    if extra:
        raise InputError(f"`model.hf_config` cannot be combined with {', '.join(extra)}.", field=f"model.{extra[0]}",
                         fix="give only `hf_config: path/to/config.json` (and `name:`), or use {catalog: name, ...} "
                             "overrides.")
    name = spec.get("name")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise InputError("`model.name` must be text.", field="model.name", value=name, expected="a model name",
                         fix="write e.g. `name: Llama-3.1-70B`, or leave it out.")
    raw = spec["hf_config"]
    if not isinstance(raw, str) or not raw.strip():
        raise InputError("`model.hf_config` must be the path of a config.json.", field="model.hf_config",
                         value=raw, expected="a file path as text", fix="write e.g. `hf_config: ./config.json`.")
    path = Path(raw) if Path(raw).is_absolute() else base_dir / raw
    if path.is_dir() or not path.exists():
        state = "is a directory" if path.is_dir() else "does not exist"
        raise InputError(f"The HuggingFace config {str(path)!r} {state}.", field="model.hf_config", value=raw,
                         expected="the path of a config.json file",
                         fix=f"check the path (relative paths start at the problem file's folder, {str(base_dir)!r}).")
    return architecture_from_hf_config(path, name=name)


def _catalog_model(spec: Mapping[str, Any]) -> ModelArchitecture:
    """`{catalog: name, ...}`: a catalog model with some fields overridden (nested mappings merge)."""
    name = spec["catalog"]
    if not isinstance(name, str):
        raise InputError("`model.catalog` must be a model name.", field="model.catalog", value=name,
                         expected="a catalog name as text", fix="`parasol models` lists the names.")
    try:
        base = load_model(name).model_dump(mode="json")
    except CatalogError as exc:
        raise CatalogError(exc.detail, field="model.catalog", value=name, expected=exc.expected, fix=exc.fix) from None
    return architecture_from_dict(_merge(base, {k: v for k, v in spec.items() if k != "catalog"}), where="model")


def _model_from_spec(spec: str | dict, base_dir: Path) -> ModelArchitecture:
    """The model a problem's `model:` section names, in whichever of the four forms it takes."""
    if isinstance(spec, str):
        return load_model(spec)
    if "hf_config" in spec:
        return _hf_model(spec, base_dir)
    if "catalog" in spec:
        return _catalog_model(spec)
    return architecture_from_dict(spec, where="model")


def resolve_model(spec: str | dict, base_dir: Path, lines: dict[Path_, int], source: str) -> ModelArchitecture:
    """A catalog name, {catalog: name} with overrides, {hf_config: path}, or an inline architecture."""
    try:
        return _model_from_spec(spec, base_dir)
    except InputError as exc:
        raise _attach(exc, source, _line_for(lines, _field_path(exc.field) or ("model",))) from None


def _attach(exc: InputError, source: str, line: int | None) -> InputError:
    """Place an error raised without a file (catalog, hardware, model) at its line in the problem file."""
    if exc.file is None:
        exc.file, exc.line = source, line
        exc.args = (exc.render(),)
    return exc


def load_problem_text(text: str, source: str = "<problem>", base_dir: Path | None = None) -> Problem:
    """Validate problem YAML text and resolve its model and hardware."""
    data, lines = _read_yaml(text, source)
    if data is None:
        raise InputError("The problem file is empty.", file=source,
                         expected="`model:`, `training:` and `hardware:` sections",
                         fix=f"start from a bundled problem, e.g. {EXAMPLE}.")
    try:
        spec = ProblemFile.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, ProblemFile, lines, source, data=data) from None
    model = resolve_model(spec.model, base_dir or Path.cwd(), lines, source)
    hardware = _resolve_hardware(spec, lines, source)
    check_routing_fits_model(spec, model, lines, source)
    return Problem(source=source, spec=spec, model=model, cluster=hardware, lines=lines)


def check_routing_fits_model(spec: ProblemFile, model: ModelArchitecture, lines: dict[Path_, int], source: str) -> None:
    """A routing skew needs an MoE model, and a measured histogram one load per routed expert with no
    expert above a 1/k share (top-k picks k distinct experts, constraints/physics/routing.py)."""
    routing = spec.contract.routing
    where = ("contract", "routing")
    if routing.skew.value != "uniform" and model.moe is None:
        raise InputError(f"contract.routing.skew is {routing.skew.value} but {model.name} has no routed experts.",
                         field="contract.routing.skew", value=routing.skew.value, expected="uniform for a dense model",
                         fix="remove contract.routing.skew, or use an MoE model.", file=source,
                         line=_line_for(lines, (*where, "skew")))
    if routing.skew.value != "histogram" or model.moe is None:
        return
    experts, k = model.moe.num_experts, model.moe.top_k
    line = _line_for(lines, (*where, "histogram"))
    if len(routing.histogram) != experts:
        raise InputError(f"contract.routing.histogram has {len(routing.histogram)} entries but {model.name} has "
                         f"{experts} routed experts.", field="contract.routing.histogram",
                         value=f"{len(routing.histogram)} entries", expected=f"{experts} entries, one per routed expert",
                         fix="give one measured load per expert, in expert order.", file=source, line=line)
    total = sum(routing.histogram)
    hot = max(range(experts), key=lambda i: routing.histogram[i])
    if routing.histogram[hot] / total > 1 / k + 1e-12:
        raise InputError(f"contract.routing.histogram gives expert {hot} a share of "
                         f"{routing.histogram[hot] / total:.3f}, above 1/k = {1 / k:.3f}: with top-{k} routing a "
                         "token picks k distinct experts, so no expert receives more than one assignment per token.",
                         field="contract.routing.histogram", value=routing.histogram[hot],
                         expected=f"every entry at most {1 / k:.3f} of the total", fix="check the measured histogram.",
                         file=source, line=line)


def _resolve_hardware(spec: ProblemFile, lines: dict[Path_, int], source: str) -> HardwarePreset:
    """The preset (with overrides) or inline hardware, checked against the GPU count."""
    hw_spec: dict = {k: v for k, v in (("preset", spec.hardware.preset), ("gpu", spec.hardware.gpu),
                                       ("topology", spec.hardware.topology)) if v is not None}
    try:
        hardware = hardware_from_spec(hw_spec)
        hardware.topology.validate_gpu_count(spec.hardware.gpus, spec.hardware.ranks_per_node)
    except InputError as exc:
        where = _field_path(exc.field) if str(exc.field).startswith("hardware") else ("hardware",)
        raise _attach(exc, source, _line_for(lines, where)) from None
    return hardware


def problem_from_parts(model: ModelArchitecture, sections: dict, source: str = "<parts>") -> Problem:
    """A Problem from an already built model and the other sections as plain data, with no YAML
    file (what `explain --megatron-args` builds without a problem file); errors name the field."""
    try:
        spec = ProblemFile.model_validate({"model": model.model_dump(mode="json"), **sections})
    except ValidationError as exc:
        raise validation_error(exc, ProblemFile, {}, source) from None
    check_routing_fits_model(spec, model, {}, source)
    return Problem(source=source, spec=spec, model=model, cluster=_resolve_hardware(spec, {}, source), lines={})


def _not_a_file(p: Path) -> InputError:
    """A path that is missing or a directory, with the problem files nearby as a hint."""
    if p.is_dir():
        inside = sorted(q.name for q in p.glob("*.yaml"))[:3]
        return InputError(f"{str(p)!r} is a directory, not a problem file.", file=str(p),
                          expected="the path of a problem .yaml file",
                          fix=f"give a file inside it, e.g. {', '.join(inside)}." if inside
                          else f"give the path of a problem file, e.g. {EXAMPLE}.")
    folder = p.parent if p.parent.is_dir() else None
    near = difflib.get_close_matches(p.name, sorted(q.name for q in folder.glob("*.yaml")), n=1) if folder else []
    hint = f"did you mean {str(p.parent / near[0])!r}? Otherwise check" if near else "check"
    return InputError(f"No problem file at {str(p)!r}.", file=str(p), expected="an existing problem .yaml file",
                      fix=f"{hint} the path; bundled problems are in problems/ (e.g. {EXAMPLE}).")


def _decode(raw: bytes, source: str) -> str:
    """UTF-8 text (a byte-order mark is allowed); other bytes are reported with their line."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise InputError(
            f"The file is not UTF-8 text: byte 0x{raw[exc.start]:02x} at line {line}, column {column} cannot be read.",
            file=source, line=line, expected="a UTF-8 YAML text file",
            fix="save the file as UTF-8 text (problem files are plain YAML).",
        ) from None


def load_problem(path: str | Path) -> Problem:
    """Read and validate a problem file from disk."""
    p = Path(path)
    if p.is_dir() or not p.exists():
        raise _not_a_file(p)
    raw = read_input_bytes(p, "problem file", limit=MAX_PROBLEM_BYTES)
    return load_problem_text(_decode(raw, str(p)), source=str(p), base_dir=p.parent)
