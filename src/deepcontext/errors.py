"""The one error type the CLI turns into a single line and an exit code."""

from __future__ import annotations


class DeepContextError(Exception):
    """A user-facing failure: its message is one line, its exit code non-zero."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class ProfileFormatError(DeepContextError):
    """The file is not a readable DeepContext profile (missing, corrupt, foreign or too new)."""
