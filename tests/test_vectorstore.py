"""Candidates from a real Chroma server on loopback (started from the chromadb PyPI package)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("langchain_core")
chromadb = pytest.importorskip("chromadb")
langchain_chroma = pytest.importorskip("langchain_chroma")

from dtdr_agents.foundation.types import Demonstration, Toolset  # noqa: E402
from dtdr_agents.retrievers.hybrid import HybridRetriever  # noqa: E402
from langchain_dtdr.vectorstore import (  # noqa: E402
    EncoderEmbeddings,
    VectorStoreCandidates,
    VectorStoreError,
    add_tools,
)

TOOLS = Toolset(
    [
        {"name": "get_weather", "description": "Current weather forecast for a city"},
        {"name": "send_email", "description": "Send an email message to a contact"},
        {"name": "find_contact", "description": "Look up a person's email address"},
        {"name": "book_flight", "description": "Book a plane ticket between two airports"},
        {"name": "translate_text", "description": "Translate text into another language"},
        {"name": "convert_currency", "description": "Convert money between currencies"},
    ]
)
DEMOS = [
    Demonstration(f"email colleague {i} the report", ("find_contact", "send_email"))
    for i in range(6)
] + [Demonstration(f"weather in city {i}", ("get_weather",)) for i in range(6)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _start_server(folder: Path) -> tuple[subprocess.Popen[bytes], int]:
    exe = shutil.which("chroma")
    if exe is None:
        pytest.skip("the chroma CLI (chromadb package) is not installed")
    port = _free_port()
    proc = subprocess.Popen(
        [exe, "run", "--path", str(folder), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=2)
            return proc, port
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.terminate()
                pytest.skip("the Chroma server did not start on loopback")
            time.sleep(0.5)


@pytest.fixture(scope="module")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    proc, port = _start_server(tmp_path_factory.mktemp("chroma"))
    try:
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def store(chroma_server: int, encoder):  # type: ignore[no-untyped-def]
    client = chromadb.HttpClient(host="127.0.0.1", port=chroma_server)
    db = langchain_chroma.Chroma(
        client=client, collection_name="tools", embedding_function=EncoderEmbeddings(encoder)
    )
    add_tools(db, TOOLS)
    return db


def test_candidates_come_from_the_server(store, encoder):  # type: ignore[no-untyped-def]
    source = VectorStoreCandidates(store)
    pairs = source("translate this sentence to Spanish", 3)
    assert pairs[0][0] == "translate_text"
    model = HybridRetriever(encoder=encoder, n_folds=2).fit(DEMOS, TOOLS)
    model.set_candidate_source(source)
    ranking = model.rank("translate this sentence to Spanish", ())
    assert ranking.top(1)[0].name == "translate_text"
    assert "from the candidate source" in ranking.explanation["candidate_source"]
    step = model.rank("email Ana the report", ("find_contact",))
    assert step.top(1)[0].name == "send_email"


def test_names_outside_the_catalogue_are_skipped_with_a_note(store, encoder):  # type: ignore[no-untyped-def]
    from langchain_core.documents import Document

    store.add_documents(
        [Document(page_content="teleport: Teleport a person", metadata={"tool_name": "teleport"})],
        ids=["teleport"],
    )
    try:
        model = HybridRetriever(encoder=encoder, n_folds=2).fit(DEMOS, TOOLS)
        model.set_candidate_source(VectorStoreCandidates(store))
        ranking = model.rank("teleport me to Paris", ())
        assert "teleport" not in ranking.names
        assert (
            "skipped 1 names outside the catalogue ('teleport')"
            in (ranking.explanation["candidate_source"])
        )
        checked = VectorStoreCandidates(store, catalogue=TOOLS)
        assert all(name != "teleport" for name, _ in checked("teleport me", 6))
        assert checked.last_skipped == ("teleport",)
    finally:
        store.delete(ids=["teleport"])


def test_unreachable_store_is_a_clear_error_and_never_crashes_a_step(encoder, tmp_path):  # type: ignore[no-untyped-def]
    proc, port = _start_server(tmp_path / "chroma")
    try:
        db = langchain_chroma.Chroma(
            client=chromadb.HttpClient(host="127.0.0.1", port=port),
            collection_name="tools",
            embedding_function=EncoderEmbeddings(encoder),
        )
        add_tools(db, TOOLS)
        source = VectorStoreCandidates(db)
        source.check()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    with pytest.raises(VectorStoreError, match="unreachable"):  # the server went away
        source.check()
    model = HybridRetriever(encoder=encoder, n_folds=2).fit(DEMOS, TOOLS)
    model.set_candidate_source(source)
    ranking = model.rank("weather in Oslo", ())
    assert ranking.top(1)[0].name == "get_weather"
    assert "used the local index" in ranking.explanation["candidate_source"]
