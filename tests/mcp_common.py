"""Shared by the MCP proxy tests: a saved DTDR-C model over the demo tools, and what it exposes.

The fixtures are module-scoped; a test module imports them by name.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import ClientSession

from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.foundation.selection import SelectionPolicy, select
from dtdr_agents.foundation.types import Demonstration
from dtdr_agents.retrievers import load_retriever, make_retriever
from dtdr_agents.retrievers.base import ToolRetriever

K = 3
"""Upstream tools a session sees per step."""


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[Demonstration]]:
    """(model folder, tools file, held-out demonstrations) of a DTDR-C fitted on 300 plans."""
    data = make_demo_dataset(340, seed=0)
    folder = tmp_path_factory.mktemp("mcp")
    retriever = make_retriever("dtdr-c", encoder="tfidf").fit(data.demos[:300], data.tools)
    retriever.save(folder / "model")
    tools_file = folder / "tools.json"
    tools_file.write_text(json.dumps(data.tools.to_list()), encoding="utf-8")
    return folder / "model", tools_file, list(data.demos[300:])


@pytest.fixture(scope="module")
def core(model: tuple[Path, Path, list[Demonstration]]) -> ToolRetriever:
    """The saved model, loaded."""
    return load_retriever(model[0])


def expected(core: ToolRetriever, query: str, history: Sequence[str]) -> list[str]:
    """The upstream tools a session with this request and history is shown (catalogue order)."""
    sel = select(core.rank(query, tuple(history)), SelectionPolicy(k=K, threshold=0.0))
    return [n for n in core.tools_.names if n in sel.names]


class Client:
    """One connected MCP `ClientSession` plus the notifications it received."""

    def __init__(self, session: ClientSession, notes: list[str]) -> None:
        self.session = session
        self.notes = notes

    async def names(self) -> list[str]:
        return [t.name for t in (await self.session.list_tools()).tools]

    async def call(self, name: str, args: dict[str, Any] | None = None) -> types.CallToolResult:
        return await self.session.call_tool(name, args or {})

    def changes(self) -> int:
        return self.notes.count("ToolListChangedNotification")
