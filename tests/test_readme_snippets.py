"""The documentation's Python blocks run as written (issue 40: "the README's snippets run").

- **README.md**: every ```python block runs, in order, in one namespace, offline (no network,
  ``HF_HUB_OFFLINE=1``, sockets to anything but loopback refused), in a scratch folder. A
  block that cannot run here is marked on the line before its fence with
  ``<!-- snippet: not run: <why> -->``; the test lists them with the reason. Where a block
  uses a chat model it does not build (``model``: "any LangChain chat model"), the test
  provides an offline scripted one that follows the plan of the namespace's demonstration
  with the same request.
- **docs/agents.md** holds many stacks' examples, several of which need a provider key or a
  framework's own test double; there a block runs when marked ``<!-- snippet: run -->`` (the
  quick start and the `StepSelector` section), in order, in one namespace of its own.
"""

from __future__ import annotations

import ast
import asyncio
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]

MARK = re.compile(r"<!--\s*snippet:\s*(?P<what>run|not run)\b:?\s*(?P<why>.*?)\s*-->", re.S)
FENCE = re.compile(r"^```python\n(?P<code>.*?)^```", re.S | re.M)


@dataclass(frozen=True)
class Block:
    """One ```python block: where it starts, its code and the marker before it."""

    path: Path
    line: int
    code: str
    mark: str | None  # "run", "not run" or None
    why: str


def blocks(path: Path) -> list[Block]:
    """The ```python blocks of a Markdown file, with the marker on the line before each."""
    text = path.read_text()
    out = []
    for fence in FENCE.finditer(text):
        line = text.count("\n", 0, fence.start()) + 1
        before = text[: fence.start()].rstrip("\n").rsplit("\n", 1)[-1]
        mark = MARK.fullmatch(before.strip())
        out.append(
            Block(
                path,
                line,
                fence["code"],
                mark["what"] if mark else None,
                mark["why"] if mark else "",
            )
        )
    return out


def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    real = socket.socket.connect

    def connect(self: socket.socket, address: Any) -> Any:
        host = address[0] if isinstance(address, tuple) else str(address)
        if host not in ("127.0.0.1", "::1", "localhost") and self.family != socket.AF_UNIX:
            raise OSError(f"a documentation snippet tried to reach {address!r}")
        return real(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)


def _scripted_model(namespace: dict[str, Any]) -> Any:
    """An offline chat model: it follows the plan of the demonstration of the same request."""
    from dtdr_agents import Toolset
    from langchain_dtdr.testing import PlanFollower, ScriptedChatModel

    def respond(messages: Any, bound: tuple[str, ...]) -> Any:
        demos = namespace.get("demos", ())
        tools = Toolset(namespace["tools"]) if "tools" in namespace else None
        return PlanFollower({d.query: d.calls for d in demos}, tools)(messages, bound)

    return ScriptedChatModel(responder=respond)


def run_blocks(chosen: list[Block], namespace: dict[str, Any]) -> None:
    """Run `chosen` in order in `namespace`; a failure names the file and line of its block."""
    for block in chosen:
        if "model" not in namespace and re.search(r"\bmodel\b", block.code):
            namespace["model"] = _scripted_model(namespace)
        where = f"{block.path.name}:{block.line}"
        code = compile(block.code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        try:
            result = eval(code, namespace)  # a block with a top-level await gives a coroutine
            if asyncio.iscoroutine(result):
                asyncio.run(result)
        except Exception as exc:
            raise AssertionError(f"the block at {where} failed: {exc!r}\n{block.code}") from exc


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    monkeypatch.chdir(tmp_path)  # the blocks save models to relative folders
    _loopback_only(monkeypatch)
    return tmp_path


def test_the_readme_python_blocks_run_in_order(
    offline: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    readme = blocks(ROOT / "README.md")
    chosen = [b for b in readme if b.mark != "not run"]
    skipped = [b for b in readme if b.mark == "not run"]
    assert len(chosen) >= 6, [b.line for b in readme]  # "Using it" and the agent stacks
    assert all(b.why for b in skipped), "a skipped block must say why"
    namespace: dict[str, Any] = {"__name__": "readme"}
    run_blocks(chosen, namespace)
    # what the blocks promise
    assert (offline / "models" / "hybrid" / "manifest.json").is_file()
    assert namespace["chosen"].names and "web_search" in namespace["chosen"].names
    steps = namespace["state"]["tool_selections"]
    bound_first = set(steps[0]["bound"])
    assert "open_file" in bound_first  # the LangGraph run followed the plan, step by step
    assert [m.type for m in namespace["state"]["messages"]].count("tool") == 4
    assert len(namespace["docs"]) == 3
    printed = capsys.readouterr().out
    assert printed.count("\n") >= 4
    print(f"README: ran {len(chosen)} blocks; not run: {[(b.line, b.why) for b in skipped]}")


def test_the_readme_marks_only_what_cannot_run_offline() -> None:
    skipped = [b for b in blocks(ROOT / "README.md") if b.mark == "not run"]
    assert [("llm" in b.code) for b in skipped] == [True]  # only the LlamaIndex agent


def test_the_marked_blocks_of_docs_agents_run(offline: Path) -> None:
    chosen = [b for b in blocks(ROOT / "docs" / "agents.md") if b.mark == "run"]
    assert len(chosen) >= 2  # the quick start and what StepSelector.select returns
    namespace: dict[str, Any] = {"__name__": "agents_md"}
    run_blocks(chosen, namespace)
    record = namespace["record"]
    assert record.names == record.selection.names and record.names
    assert namespace["state"]["tool_selections"]  # the zero-shot LangGraph agent ran
    assert [m.type for m in namespace["state"]["messages"]].count("tool") == 2


def test_a_failing_block_names_its_file_and_line(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("# t\n\n```python\nx = 1\n```\n\n<!-- snippet: run -->\n```python\n1 / 0\n```\n")
    found = blocks(doc)
    assert [(b.line, b.mark) for b in found] == [(3, None), (8, "run")]
    with pytest.raises(AssertionError, match=r"doc\.md:8 failed: ZeroDivisionError"):
        run_blocks(found, {})
