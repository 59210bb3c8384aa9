"""The exceptions parasol raises for bad input; the CLI turns each into one paragraph and exit 2."""

from __future__ import annotations


class ParasolError(Exception):
    """Base of every error parasol reports to a user instead of a traceback."""


class InputError(ParasolError):
    """A problem file, flag or catalog entry is wrong: names where, what, what was expected and a fix."""

    def __init__(
        self,
        message: str,
        *,
        field: str | None = None,
        value: object = None,
        expected: str | None = None,
        fix: str | None = None,
        file: str | None = None,
        line: int | None = None,
    ) -> None:
        self.field = field
        self.value = value
        self.expected = expected
        self.fix = fix
        self.file = file
        self.line = line
        self.detail = message
        super().__init__(self.render())

    def render(self) -> str:
        """One paragraph: location, field, value, what was expected, and the next step."""
        where = ""
        if self.file:
            where = f"{self.file}:{self.line}: " if self.line else f"{self.file}: "
        parts = [f"{where}{self.detail}"]
        if self.field is not None:
            parts.append(f"Field `{self.field}`" + (f" has value {self.value!r}." if self.value is not None else "."))
        if self.expected:
            parts.append(f"Expected {self.expected}.")
        if self.fix:
            parts.append(f"Fix: {self.fix}")
        return " ".join(parts)


class CatalogError(InputError):
    """A name that is not in a catalog (model or hardware preset)."""
