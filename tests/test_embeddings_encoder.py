"""Any embedding model as encoder: a LangChain `Embeddings`, a LlamaIndex embedding, a callable.

The LangChain case runs `langchain_openai.OpenAIEmbeddings` against the loopback server's
``/v1/embeddings`` route, which counts every text it embeds.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from openai_server import OpenAIChatServer, clear_proxies, hashed_bow

from dtdr_agents import make_retriever
from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.foundation.encoders import CallableEncoder, get_encoder
from dtdr_agents.foundation.errors import EncoderOutputError
from dtdr_agents.foundation.persistence import EncoderMismatchError
from dtdr_agents.foundation.types import Demonstration, Toolset
from dtdr_agents.retrievers import load_retriever

MODEL = "text-embedding-3-small"
LC_ID = f"langchain:OpenAIEmbeddings:{MODEL}"


@pytest.fixture(scope="module")
def data() -> tuple[list[Demonstration], Toolset]:
    """60 demo demonstrations and their catalogue."""
    ds = make_demo_dataset(n=60, seed=3)
    return list(ds.demos), ds.tools


def distinct_texts(data: tuple[list[Demonstration], Toolset]) -> set[str]:
    """What fitting DTDR-C embeds: every request and every tool text."""
    demos, tools = data
    return {d.query for d in demos} | {t.text() for t in tools}


PROBE = CallableEncoder.PROBE  # embedded once per id and cache when no dim is given


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh default on-disk embedding cache per test."""
    folder = tmp_path / "embedding-cache"
    monkeypatch.setenv("DTDR_AGENTS_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[OpenAIChatServer]:
    """The loopback OpenAI-compatible server (only its embeddings route is used)."""
    clear_proxies(monkeypatch)
    with OpenAIChatServer(lambda body: {"content": "unused"}) as srv:
        yield srv


def openai_embeddings(server: OpenAIChatServer, model: str = MODEL) -> Any:
    """A new `OpenAIEmbeddings` client of the loopback server (no tokenizer download)."""
    from langchain_openai import OpenAIEmbeddings

    return OpenAIEmbeddings(
        model=model,
        base_url=server.base_url,
        api_key="test",  # type: ignore[arg-type]
        check_embedding_ctx_length=False,
        tiktoken_enabled=False,
        max_retries=0,
    )


def stored_texts(cache: Path, encoder_id: str, texts: Iterable[str]) -> set[str]:
    """Those of `texts` whose vector the on-disk cache holds for `encoder_id`."""
    db_path = cache / "embeddings.sqlite"
    if not db_path.exists():
        return set()
    with sqlite3.connect(db_path) as db:
        rows = db.execute("SELECT key FROM emb WHERE encoder = ?", [encoder_id]).fetchall()
    keys = {key for (key,) in rows}
    return {t for t in texts if hashlib.sha1(t.encode()).hexdigest() in keys}


def top(model: Any, query: str, k: int = 3) -> list[str]:
    """Names of the `k` best tools for `query` at the first step."""
    return [t.name for t in model.rank(query, ()).top(k)]


# ------------------------------------------------------------------ LangChain Embeddings


def test_openai_embeddings_embed_each_text_once_and_a_refit_makes_no_request(
    server: OpenAIChatServer, data: tuple[list[Demonstration], Toolset], cache_dir: Path
) -> None:
    demos, tools = data
    first = make_retriever("dtdr-c", encoder=openai_embeddings(server)).fit(demos, tools)
    texts = server.embedded_texts
    requests = len(server.embedding_requests)
    print(
        f"first fit: {requests} requests, {len(texts)} texts sent, {len(set(texts))} distinct, "
        f"{len(distinct_texts(data))} distinct texts in the data"
    )
    assert max(Counter(texts).values()) == 1  # no text embedded twice
    assert set(texts) == distinct_texts(data) | {PROBE}
    assert stored_texts(cache_dir, LC_ID, texts) == set(texts)

    # a new client object: the in-process cache is not shared, the on-disk one is
    second = make_retriever("dtdr-c", encoder=openai_embeddings(server)).fit(demos, tools)
    print(f"second fit: {len(server.embedding_requests) - requests} requests")
    assert len(server.embedding_requests) == requests
    for demo in demos[:10]:
        assert top(second, demo.query) == top(first, demo.query)


def test_the_same_embeddings_object_is_one_shared_encoder(server: OpenAIChatServer) -> None:
    emb = openai_embeddings(server)
    encoder = get_encoder(emb)
    assert get_encoder(emb) is encoder
    assert isinstance(encoder, CallableEncoder) and encoder.id == LC_ID
    assert get_encoder(openai_embeddings(server, "other-model")).id != LC_ID


def test_vectors_are_the_servers_normalised(server: OpenAIChatServer) -> None:
    encoder = get_encoder(openai_embeddings(server))
    texts = ["weather in Rome", "book a flight to Paris"]
    out = encoder.encode(texts)
    expected = np.array([hashed_bow(t) for t in texts])
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    assert out.dtype == np.float32 and out.shape == (2, 64) and encoder.dim == 64
    np.testing.assert_allclose(out, expected, atol=1e-6)


def test_server_answers_float_and_base64(server: OpenAIChatServer) -> None:
    import openai

    client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    for fmt in ("float", "base64"):
        reply = client.embeddings.create(input=["open a file"], model=MODEL, encoding_format=fmt)
        data = reply.data[0].embedding
        got = np.frombuffer(base64.b64decode(data), "<f4") if fmt == "base64" else data
        np.testing.assert_allclose(got, hashed_bow("open a file"), atol=1e-6)
    assert [b["encoding_format"] for b in server.embedding_requests] == ["float", "base64"]


def test_batch_size_bounds_each_request(
    server: OpenAIChatServer, data: tuple[list[Demonstration], Toolset]
) -> None:
    demos, tools = data
    encoder = CallableEncoder(openai_embeddings(server), batch_size=16, disk_cache=False)
    make_retriever("dtdr-c", encoder=encoder).fit(demos, tools)
    sizes = [len(body["input"]) for body in server.embedding_requests]
    assert server.embedding_requests[0]["input"] == [PROBE]
    assert max(sizes) == 16
    assert sum(sizes) == len(distinct_texts(data)) + 1
    assert encoder.cache_dir is None


def test_saved_model_needs_the_embeddings_again(
    server: OpenAIChatServer, data: tuple[list[Demonstration], Toolset], tmp_path: Path
) -> None:
    demos, tools = data
    model = make_retriever("dtdr-c", encoder=openai_embeddings(server)).fit(demos, tools)
    folder = model.save(tmp_path / "model")
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["encoder"]["id"] == LC_ID and manifest["encoder"]["object"] is True

    with pytest.raises(EncoderMismatchError) as missing:
        load_retriever(folder)
    message = str(missing.value)
    assert LC_ID in message and "CallableEncoder" in message and "encoder=" in message
    with pytest.raises(EncoderMismatchError, match="text-embedding-3-large"):
        load_retriever(folder, encoder=openai_embeddings(server, "text-embedding-3-large"))

    requests = len(server.embedding_requests)
    loaded = load_retriever(folder, encoder=openai_embeddings(server))
    query = demos[0].query
    assert top(loaded, query) == top(model, query)
    assert len(server.embedding_requests) == requests  # the request's vector was cached
    assert loaded.encoder is loaded.encoder_  # a refit uses the model given, not its id
    refit = loaded.fit(demos, tools)
    assert top(refit, query) == top(model, query)
    assert len(server.embedding_requests) == requests


def test_cli_names_the_python_keyword_for_an_object_encoder(
    server: OpenAIChatServer, data: tuple[list[Demonstration], Toolset], tmp_path: Path
) -> None:
    demos, tools = data
    model = make_retriever("dtdr-c", encoder=openai_embeddings(server)).fit(demos, tools)
    with pytest.raises(EncoderMismatchError) as missing:
        load_retriever(model.save(tmp_path / "model"))
    message = missing.value.describe(encoder=f"--encoder {LC_ID}")
    assert "loads in Python only" in message


def test_langchain_retriever_takes_the_embeddings(
    server: OpenAIChatServer, data: tuple[list[Demonstration], Toolset]
) -> None:
    from langchain_dtdr import DTDRRetriever

    demos, tools = data
    emb = openai_embeddings(server)
    lc = DTDRRetriever.from_demonstrations(demos, tools, retriever="dtdr-c", encoder=emb, k=3)
    docs = lc.invoke(demos[0].query)
    core = make_retriever("dtdr-c", encoder=emb).fit(demos, tools)
    assert [d.metadata["name"] for d in docs] == top(core, demos[0].query)


# ------------------------------------------------------------------------ plain callable


class CountingFunction:
    """A plain embedding function (hashed bag of words) that records every call."""

    def __init__(self, dim: int = 32) -> None:
        self.dim = dim
        self.calls: list[list[str]] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        return np.array([hashed_bow(t, self.dim) for t in texts])


def test_plain_callable_needs_an_id(data: tuple[list[Demonstration], Toolset]) -> None:
    demos, tools = data
    with pytest.raises(ValueError, match="stable id"):
        make_retriever("dtdr-c", encoder=CountingFunction()).fit(demos, tools)
    with pytest.raises(ValueError, match="stable id"):
        CallableEncoder(CountingFunction())
    with pytest.raises(ValueError, match="batch_size"):
        CallableEncoder(CountingFunction(), id="x", batch_size=0)
    with pytest.raises(TypeError, match="LangChain Embeddings"):
        get_encoder(object())  # type: ignore[arg-type]


def test_plain_callable_fits_saves_and_loads(
    data: tuple[list[Demonstration], Toolset], tmp_path: Path
) -> None:
    demos, tools = data
    fn = CountingFunction()
    encoder = CallableEncoder(fn, id="hash:bow32", dim=32, batch_size=7)
    model = make_retriever("dtdr-c", encoder=encoder).fit(demos, tools)
    assert max(len(c) for c in fn.calls) == 7
    sent = [t for c in fn.calls for t in c]
    assert max(Counter(sent).values()) == 1 and set(sent) == distinct_texts(data)

    folder = model.save(tmp_path / "model")
    with pytest.raises(EncoderMismatchError, match="hash:bow32"):
        load_retriever(folder)
    other = CallableEncoder(CountingFunction(), id="hash:other", dim=32)
    with pytest.raises(EncoderMismatchError, match="hash:other"):
        load_retriever(folder, encoder=other)
    again = CallableEncoder(CountingFunction(), id="hash:bow32", dim=32)
    loaded = load_retriever(folder, encoder=again)
    assert top(loaded, demos[3].query) == top(model, demos[3].query)


# ------------------------------------------------------------------- LlamaIndex embedding


def test_llama_index_embedding(data: tuple[list[Demonstration], Toolset], tmp_path: Path) -> None:
    from llama_index.core.base.embeddings.base import BaseEmbedding
    from pydantic import Field

    class HashEmbedding(BaseEmbedding):
        texts: list[str] = Field(default_factory=list)

        def _get_text_embedding(self, text: str) -> list[float]:
            self.texts.append(text)
            return hashed_bow(text, 48)

        def _get_query_embedding(self, query: str) -> list[float]:
            return self._get_text_embedding(query)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._get_text_embedding(query)

    demos, tools = data
    emb = HashEmbedding(model_name="hash-bow-48")
    model = make_retriever("dtdr-c", encoder=emb).fit(demos, tools)
    assert model.encoder_ is not None
    assert model.encoder_.id == "llama-index:HashEmbedding:hash-bow-48"
    assert model.encoder_.dim == 48
    assert max(Counter(emb.texts).values()) == 1
    assert set(emb.texts) == distinct_texts(data) | {PROBE}
    loaded = load_retriever(model.save(tmp_path / "model"), encoder=emb)
    assert top(loaded, demos[5].query) == top(model, demos[5].query)
    with pytest.raises(ValueError, match="stable id"):
        get_encoder(HashEmbedding())  # model_name "unknown" names no model


# ---------------------------------------------------------------------------- bad input

BAD = "a text the model answers badly"


def _answer(bad: Callable[[list[str]], Any]) -> Callable[[list[str]], Any]:
    """Good vectors, except for a batch holding `BAD`, which `bad` answers."""

    def fn(texts: list[str]) -> Any:
        if BAD in texts:
            return bad(texts)
        return [hashed_bow(t, 16) for t in texts]

    return fn


BAD_ANSWERS: dict[str, tuple[Callable[[list[str]], Any], str]] = {
    "fewer vectors": (lambda ts: [hashed_bow(t, 16) for t in ts[1:]], r"returned \d+ vectors for"),
    "more vectors": (lambda ts: [hashed_bow(t, 16) for t in [*ts, "x"]], r"vectors for \d+ texts"),
    "varying size": (
        lambda ts: [hashed_bow(t, 15 if t == BAD else 16) for t in ts],
        "vectors of varying size: 15 values",
    ),
    "size change": (lambda ts: [hashed_bow(t, 20) for t in ts], "varying size: 20 values"),
    "nan": (lambda ts: [[float("nan")] * 16 for _ in ts], "NaN or infinite"),
    "inf": (lambda ts: [[float("inf")] + [0.0] * 15 for _ in ts], "NaN or infinite"),
    "not numbers": (lambda ts: ["vector"] * len(ts), "not one vector of numbers"),
    "matrix rows": (lambda ts: np.zeros((len(ts), 2, 8)), r"array of shape \(2, 8\)"),
    "none": (lambda ts: None, "returned NoneType"),
}


@pytest.mark.parametrize("case", list(BAD_ANSWERS))
def test_bad_answers_are_refused_and_nothing_is_saved(
    case: str, data: tuple[list[Demonstration], Toolset], tmp_path: Path, cache_dir: Path
) -> None:
    demos, tools = data
    bad, pattern = BAD_ANSWERS[case]
    demos = [*demos, Demonstration(BAD, (demos[0].calls[0],))]
    encoder_id = f"test:bad-{case.replace(' ', '-')}"
    # batches of 8: the tool texts' batches succeed before the bad one fails
    encoder = CallableEncoder(_answer(bad), id=encoder_id, batch_size=8)
    out = tmp_path / "model"
    with pytest.raises(EncoderOutputError, match=pattern) as err:
        make_retriever("dtdr-c", encoder=encoder).fit(demos, tools).save(out)
    assert encoder_id in str(err.value)
    assert not out.exists()
    # the earlier, valid answers (the tool texts) stay cached; none of the failed call's do
    failed_call = {d.query for d in demos}
    assert stored_texts(cache_dir, encoder_id, failed_call) == set()
    assert stored_texts(cache_dir, encoder_id, [t.text() for t in tools]) == {
        t.text() for t in tools
    }


def test_declared_dim_is_checked(data: tuple[list[Demonstration], Toolset]) -> None:
    demos, tools = data
    encoder = CallableEncoder(lambda ts: [hashed_bow(t, 16) for t in ts], id="test:d", dim=24)
    with pytest.raises(EncoderOutputError, match=r"16 values .* not its declared dim 24"):
        make_retriever("dtdr-c", encoder=encoder).fit(demos, tools)


def test_bad_server_answer_through_openai_embeddings(
    monkeypatch: pytest.MonkeyPatch, data: tuple[list[Demonstration], Toolset]
) -> None:
    clear_proxies(monkeypatch)
    ragged = lambda texts: [hashed_bow(t, 64 - (i % 2)) for i, t in enumerate(texts)]  # noqa: E731
    with OpenAIChatServer(lambda body: {"content": "unused"}, embedder=ragged) as srv:
        emb = openai_embeddings(srv)
        with pytest.raises(EncoderOutputError, match=f"{LC_ID}.*varying size"):
            make_retriever("dtdr-c", encoder=emb).fit(*data)
