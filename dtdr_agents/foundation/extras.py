"""Install hints for the optional extras: a missing framework names the extra that brings it.

The integration packages (`langchain_dtdr`, `langgraph_dtdr`, `llama_index_dtdr`, `mcp_dtdr`)
import their framework when they are imported. Without the extra, Python's own error is a bare
``ModuleNotFoundError: No module named 'langgraph'``; inside `needs_extra` it becomes::

    ImportError: langgraph_dtdr needs the langgraph extra: pip install 'dtdr-agents[langgraph]'
    (No module named 'langgraph')

This module imports no framework: it only names them.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import MappingProxyType

EXTRA_MODULES = MappingProxyType(
    {
        "langchain": ("langchain_core", "langchain"),
        "langgraph": ("langchain_core", "langgraph"),
        "llamaindex": ("llama_index",),
        "mcp": ("mcp",),
    }
)
"""Extra -> the top-level modules it installs that an integration imports."""


def install_hint(package: str, extra: str) -> str:
    """The one-line hint, e.g. ``mcp_dtdr needs the mcp extra: pip install 'dtdr-agents[mcp]'``."""
    return f"{package} needs the {extra} extra: pip install 'dtdr-agents[{extra}]'"


@contextmanager
def needs_extra(package: str, extra: str) -> Iterator[None]:
    """Turn an import error of the extra's modules inside the block into an install hint.

    An `ImportError` of another module (a bug, not a missing extra) passes unchanged. Nested
    blocks (`langgraph_dtdr` imports `langchain_dtdr`) give the outermost package's hint: the
    extra of the package the user imported.

    Args:
        package: The importing package, named in the message.
        extra: Its extra, a key of `EXTRA_MODULES`.

    Raises:
        ImportError: With the hint; ``name`` is the missing module, the cause the original.
    """
    modules = EXTRA_MODULES[extra]
    try:
        yield
    except ImportError as exc:
        if (exc.name or "").split(".")[0] not in modules:
            raise
        root: BaseException = exc
        while isinstance(root.__cause__, ImportError):  # a nested block's hint: keep the first
            root = root.__cause__
        raise ImportError(f"{install_hint(package, extra)} ({root})", name=exc.name) from root


__all__ = ["EXTRA_MODULES", "install_hint", "needs_extra"]
