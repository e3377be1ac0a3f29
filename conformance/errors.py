"""Errors a user can cause. Each names the file and, where it applies, the JSON path."""

from __future__ import annotations


class ConformanceError(Exception):
    """Base of every user-facing error; the CLI prints it without a traceback and exits 2."""

    exit_code = 2


class CaseError(ConformanceError):
    """A case file that cannot be used. `problems` holds one line per error: `file: json.path: message`."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class UnknownCaseError(ConformanceError):
    pass


class UnknownEngineError(ConformanceError):
    pass


class OracleEnvError(ConformanceError):
    """An oracle virtualenv that is missing, broken, or failed to build."""


class RunDirWriteError(ConformanceError):
    """A run directory that could not be written (a full disk): the message says what was kept."""

    exit_code = 1
