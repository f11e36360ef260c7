"""Errors in the words the user typed: command-line flags, not the library's Python keywords.

The library's messages name its keyword arguments (``pass ignore_unknown=True``,
``load_dataset('jsonl') needs a path``); on the command line the same problem is reported
with the flag (``--ignore-unknown``, ``--path``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from dtdr_agents.cli._errors import CLIError

FLAG_OF_KEYWORD = {
    "tools_path": "--tools",
    "train_split": "--train-split",
    "test_split": "--test-split",
    "skip_bad": "--skip-bad",
    "ignore_unknown=True": "--ignore-unknown",
    "allow_encoder_change=True": "--allow-encoder-change",
}
"""Python keywords of the dataset loaders and `rank` -> the flags that set them."""

_KEYWORD = re.compile(r"\b(" + "|".join(re.escape(k) for k in FLAG_OF_KEYWORD) + r")(?![\w=])")
_NEEDS_PATH = re.compile(r"load_dataset\('(?P<id>[\w-]+)'\) needs a path")


def in_flag_words(message: str) -> str:
    """`message` with the library's keyword arguments replaced by the CLI's flags."""
    message = _NEEDS_PATH.sub(lambda m: f"--dataset {m['id']} needs --path", message)
    return _KEYWORD.sub(lambda m: FLAG_OF_KEYWORD[m[1]], message)


@contextmanager
def flag_words() -> Iterator[None]:
    """Re-raise the library's `ValueError`/`TypeError` inside the block in flag words."""
    try:
        yield
    except (ValueError, TypeError) as exc:
        text = str(exc)
        worded = in_flag_words(text)
        if worded == text:
            raise
        raise CLIError(worded) from exc


__all__ = ["FLAG_OF_KEYWORD", "flag_words", "in_flag_words"]
