"""Exceptions raised by dtdr-agents.

Every error names what was wrong (the field, the tool, the file and line) so that a user can fix
the input without reading the source.
"""

from __future__ import annotations


class DTDRError(Exception):
    """Base class of every error raised by dtdr-agents."""


class InvalidToolError(DTDRError, ValueError):
    """A tool definition or a tool catalogue is malformed (empty or duplicate names, bad schema)."""


class UnknownToolError(DTDRError, KeyError):
    """A name (in a history, a demonstration or an option) is not in the tool catalogue."""

    def __init__(self, message: str, names: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.names = names

    def __str__(self) -> str:  # KeyError would quote the message otherwise
        return str(self.args[0])


class InvalidDemonstrationError(DTDRError, ValueError):
    """A demonstration is malformed (empty query, bad dependency edge, unknown tool)."""


class NotFittedError(DTDRError, RuntimeError):
    """A retriever was used before `fit` (or `load`)."""


class DatasetFormatError(DTDRError, ValueError):
    """A dataset file does not parse; the message names the file and line."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None) -> None:
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(where + message)
        self.path = path
        self.line = line


class ModelLoadError(DTDRError, ValueError):
    """A saved retriever folder is corrupt, from another version, or mismatched."""


class ModelArrayError(ModelLoadError):
    """A learned array of a saved retriever is malformed or out of range.

    Attributes:
        array: The array's name (as the retriever knows it, or its full name in the file).
        problem: What is wrong with it.
        file: The arrays file, once known.
    """

    def __init__(self, array: str, problem: str, file: str | None = None) -> None:
        self.array = array
        self.problem = problem
        self.file = file
        where = f"{file}: " if file is not None else ""
        super().__init__(f"{where}array {array!r} {problem}")


class ModelSaveError(DTDRError, ValueError):
    """A fitted retriever cannot be saved as a folder that a load would accept."""


class EncoderUnavailableError(DTDRError, RuntimeError):
    """No sentence encoder could be loaded; the message lists the options."""


class EncoderOutputError(DTDRError, ValueError):
    """An embedding model returned unusable vectors (wrong count or size, NaN or infinity)."""


class RankingError(DTDRError, RuntimeError):
    """A retriever produced a ranking that cannot be used.

    Its probabilities are NaN, infinite, negative or of the wrong length: the model is corrupt
    or misconfigured, and serving it would hand the agent nothing sensible.
    """


class ChatModelError(DTDRError, RuntimeError):
    """A chat model call failed or returned something that could not be used."""
