"""Reading inputs and writing outputs safely: only regular files of bounded size are read, every file
read is remembered, and no output may replace a file parasol read (a typo such as `--rank-map p.yaml`
would otherwise destroy the user's input). Failures are InputErrors naming the flag and a fix.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from parasol.bounds import MAX_INPUT_BYTES
from parasol.errors import InputError

SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader when PyYAML has it (a tenth of the pure-Python one's time), else the pure-Python one."""


def bundled_yaml(text: str) -> Any:
    """The data of one of parasol's own YAML files (presets, catalog models, coefficients): what
    yaml.safe_load reads, parsed by SAFE_LOADER, since every command reads several of them."""
    return yaml.load(text, Loader=SAFE_LOADER)


_READ: set[tuple[int, int, int]] = set()
"""(device, inode, modification time) of every file read by this command: outputs must not replace one.
The time tells a file from a later one that reuses a deleted file's inode."""


def _identity(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino, st.st_mtime_ns


def forget_reads() -> None:
    """Start a new command: the files earlier commands of this process read are not its inputs."""
    _READ.clear()


def read_input_bytes(path: str | Path, what: str, field: str | None = None, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of an input file: it must exist, be a regular file (not a device, pipe or folder) and
    hold at most `limit` bytes; the file is remembered as an input."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        raise InputError(f"The {what} {str(p)!r} was not found (no such file).", field=field,
                         fix="check the path.") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"Cannot open the {what} {str(p)!r}: {getattr(exc, 'strerror', None) or exc}.",
                         field=field, fix="check the path and its permissions.") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"The {what} {str(p)!r} is a folder, not a file.", field=field,
                         fix="give the path of the file inside it.")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"The {what} {str(p)!r} is not a regular file (a device, pipe or socket).", field=field,
                         fix="save the input to an ordinary file and pass that file.")
    if st.st_size > limit:
        raise InputError(f"The {what} {str(p)!r} holds {st.st_size:,} bytes, more than parasol reads "
                         f"({limit:,}).", field=field, fix="check that this is the intended file.")
    try:
        with p.open("rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise InputError(f"Cannot read the {what} {str(p)!r}: {exc.strerror or exc}.", field=field,
                         fix="check the file's permissions.") from None
    if len(data) > limit:
        raise InputError(f"The {what} {str(p)!r} holds more than {limit:,} bytes.", field=field,
                         fix="check that this is the intended file.")
    _READ.add((st.st_dev, st.st_ino, st.st_mtime_ns))
    return data


def read_input_text(path: str | Path, what: str, field: str | None = None) -> str:
    """An input file as UTF-8 text (see read_input_bytes)."""
    data = read_input_bytes(path, what, field)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"The {what} {str(path)!r} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                         f"{exc.start:,}).", field=field, fix="save the file as UTF-8 text.") from None


def check_output(path: str | Path, field: str, inputs: tuple[str | Path, ...] = ()) -> Path:
    """Refuse an output path that is a file parasol read in this run, or one of `inputs` (read later)."""
    p = Path(path)
    ident = _identity(p)
    if ident is not None and (ident in _READ or ident in {_identity(Path(i)) for i in inputs}):
        raise InputError(f"{field} {str(p)!r} is an input of this command; writing it would destroy the input.",
                         field=field, value=str(p), fix="choose another output path.")
    return p


@contextmanager
def writing(path: str | Path, field: str) -> Iterator[Path]:
    """Guard one output: refuse an input file, and turn an OS error while writing into an InputError."""
    p = check_output(path, field)
    try:
        yield p
    except OSError as exc:
        raise InputError(f"Cannot write {field} {str(p)!r}: {exc.strerror or exc}.", field=field, value=str(p),
                         fix="choose a writable path in an existing folder.") from None


def output_folder(path: str | Path, field: str) -> Path:
    """Create an output folder (with its parents), refusing a file in its place."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise InputError(f"{field} {str(p)!r} is a file, not a folder.", field=field, value=str(p),
                         fix="give a folder path.")
    with writing(p, field):
        os.makedirs(p, exist_ok=True)
    return p
