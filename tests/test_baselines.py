"""Tests of the DTDR paper's non-learned baselines (random, bm25, qts, tgr, lim) and peer-gtc."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.evaluation.protocol import evaluate
from dtdr_agents.foundation.chat import ChatModel, OpenAIChat, invoke_text, message_text
from dtdr_agents.foundation.encoders import get_encoder
from dtdr_agents.foundation.errors import ChatModelError, NotFittedError
from dtdr_agents.foundation.types import END_OF_PLAN, Demonstration, Tool
from dtdr_agents.retrievers import ToolRetriever, class_by_name, make_retriever
from dtdr_agents.retrievers.baselines import (
    BM25Retriever,
    LessIsMoreRetriever,
    QTSRetriever,
    RandomRetriever,
    ToolGraphRetriever,
    dependency_pairs,
    graph_convolution,
    parse_ideal_tools,
    similarity_probabilities,
    split_identifiers,
)
from dtdr_agents.retrievers.peer import GraphToolCallRetriever, rank_probabilities

IDS = ["random", "bm25", "qts", "tgr", "lim", "peer-gtc"]
QUERY_ONLY = {"bm25", "qts", "tgr", "lim"}


class ScriptedChat:
    """A chat model double: answers from a script (query -> text) or echoes the request."""

    def __init__(self, script: dict[str, str] | None = None) -> None:
        self.script = script or {}
        self.calls: list[list[tuple[str, str]]] = []

    def invoke(self, messages: list[tuple[str, str]], /) -> Any:
        self.calls.append(list(messages))
        user = messages[-1][1].removeprefix("User request: ")
        if user in self.script:
            return self.script[user]
        return json.dumps({"tools": [{"name": "ideal_tool", "description": user}]})

    def asked(self) -> list[str]:
        return [m[-1][1].removeprefix("User request: ") for m in self.calls]


@pytest.fixture(scope="module")
def enc() -> Any:
    e = get_encoder("default")
    e.encode(["warm up"])
    return e


@pytest.fixture(scope="module")
def data() -> Any:
    return make_demo_dataset(300, seed=5)


@pytest.fixture(scope="module")
def split(data: Any) -> tuple[list[Demonstration], list[Demonstration]]:
    demos = list(data.demos)
    return demos[:250], demos[250:]


def build(rid: str, enc: Any, chat: ChatModel | None = None, **params: Any) -> ToolRetriever:
    if rid == "peer-gtc":
        pytest.importorskip("graph_tool_call")
    if rid == "bm25":
        pytest.importorskip("bm25s")
    if rid in ("qts", "tgr", "lim"):
        params.setdefault("encoder", enc)
    if rid == "lim":
        params.setdefault("chat_model", chat or ScriptedChat())
    return make_retriever(rid, **params)


def probe_steps(test: list[Demonstration], n: int = 6) -> list[tuple[str, tuple[str, ...]]]:
    return [(d.query, s.history) for d in test[:n] for s in d.steps()]


# ------------------------------------------------------------------------- shared contract
def test_registered() -> None:
    for cls in (
        RandomRetriever,
        BM25Retriever,
        QTSRetriever,
        ToolGraphRetriever,
        LessIsMoreRetriever,
        GraphToolCallRetriever,
    ):
        assert class_by_name(cls.__name__) is cls
    assert {type(make_retriever(rid)).retriever_id for rid in IDS} == set(IDS)


@pytest.mark.parametrize("rid", IDS)
def test_fit_returns_self_and_unfitted_raises(rid: str, enc: Any, split: Any, data: Any) -> None:
    model = build(rid, enc)
    with pytest.raises(NotFittedError):
        model.rank("book a meeting")
    assert model.fit(split[0], data.tools) is model


@pytest.mark.parametrize("rid", IDS)
def test_distribution_and_determinism(rid: str, enc: Any, split: Any, data: Any) -> None:
    train, test = split
    a = build(rid, enc).fit(train, data.tools)
    b = build(rid, enc).fit(train, data.tools)
    expected_names = (*data.tools.names, END_OF_PLAN)
    for query, history in probe_steps(test, 4):
        ra = a.rank(query, history)
        assert ra.names == expected_names
        assert ra.probabilities.shape == (len(expected_names),)
        assert np.all(ra.probabilities >= 0)
        assert ra.probabilities.sum() == pytest.approx(1.0)
        assert ra.explanation["method"] == rid
        np.testing.assert_array_equal(ra.probabilities, a.rank(query, history).probabilities)
        np.testing.assert_allclose(ra.probabilities, b.rank(query, history).probabilities)
        if rid in QUERY_ONLY:
            assert not a.uses_history
            assert ra.probability(END_OF_PLAN) == pytest.approx(a.end_rate_)
            np.testing.assert_array_equal(ra.probabilities, a.rank(query).probabilities)
        else:
            assert a.uses_history


@pytest.mark.parametrize("rid", IDS)
def test_save_load_round_trip(rid: str, enc: Any, split: Any, data: Any, tmp_path: Any) -> None:
    train, test = split
    chat = ScriptedChat()
    model = build(rid, enc, chat=chat).fit(train, data.tools)
    path = model.save(tmp_path / rid)
    manifest = json.loads((path / "manifest.json").read_text())
    assert "chat_model" not in manifest["params"]
    if rid == "lim":
        loaded: ToolRetriever = LessIsMoreRetriever.load(path, chat_model=chat)
    else:
        loaded = ToolRetriever.load(path)
    assert type(loaded) is type(model)
    assert loaded.get_params().keys() == model.get_params().keys()
    for query, history in probe_steps(test):
        before, after = model.rank(query, history), loaded.rank(query, history)
        assert after.ranked_names() == before.ranked_names()
        np.testing.assert_allclose(after.probabilities, before.probabilities, rtol=1e-6)


@pytest.mark.parametrize("rid", IDS)
def test_catalogue_change_after_fit(rid: str, enc: Any, split: Any, data: Any) -> None:
    model = build(rid, enc).fit(split[0], data.tools)
    kept = [t for t in data.tools if t.name != "get_weather"]
    model.set_tools([*kept, Tool("check_forecast", "Check the weather forecast for a city")])
    ranking = model.rank("Will it rain in Paris tomorrow?", ["get_current_location"])
    assert "get_weather" not in ranking.names
    assert ranking.names[-2:] == ("check_forecast", END_OF_PLAN)
    assert ranking.probabilities.sum() == pytest.approx(1.0)
    assert "added after fit" in ranking.why("check_forecast")


def test_query_only_rank_once_per_query_in_evaluation(enc: Any, split: Any, data: Any) -> None:
    train, test = split
    chat = ScriptedChat()
    model = build("lim", enc, chat=chat).fit(train, data.tools)
    result = evaluate(model, test[:10])
    assert result.error is None
    assert result.n_steps == sum(len(d.calls) + 1 for d in test[:10])
    assert sorted(chat.asked()) == sorted({d.query for d in test[:10]})


# ----------------------------------------------------------------------------------- random
def test_random_is_seeded_per_query_and_history(split: Any, data: Any) -> None:
    train, _ = split
    model = RandomRetriever(seed=1).fit(train, data.tools)
    r1 = model.rank("find a cafe", ["get_current_location"])
    assert len(set(r1.probabilities.tolist())) == len(r1.names)  # a strict order
    assert r1.ranked_names() != model.rank("find a cafe").ranked_names()
    assert r1.ranked_names() != model.rank("find a bar", ["get_current_location"]).ranked_names()
    other = RandomRetriever(seed=2).fit(train, data.tools)
    assert other.rank("find a cafe", ["get_current_location"]).ranked_names() != r1.ranked_names()
    p = r1.probabilities
    assert p.max() / p.min() < 2.0  # uniform-ish


def test_random_ranking_is_near_chance(split: Any, data: Any) -> None:
    train, test = split
    result = evaluate(RandomRetriever().fit(train, data.tools), test)
    assert 0.05 < result.metrics["mrr"] < 0.35


# ------------------------------------------------------------------------------------- bm25
def test_split_identifiers() -> None:
    assert split_identifiers("get_email_address") == "get email address"
    assert split_identifiers("getEmailAddress") == "get Email Address"
    assert split_identifiers("maps.show-directions") == "maps show directions"


def test_bm25_ranks_matching_tool_first(split: Any, data: Any) -> None:
    pytest.importorskip("bm25s")
    model = BM25Retriever().fit(split[0], data.tools)
    assert model.rank("Summarize this PDF file for me").top(1)[0].name == "summarize_pdf"
    assert model.rank("what is the weather forecast tomorrow").top(1)[0].name == "get_weather"
    assert model.rank("translate into French").top(1)[0].name == "translate_text"
    scores = model.bm25_scores("zoom meeting")
    assert int(np.argmax(scores)) == data.tools.index("create_zoom_meeting")


def test_bm25_no_matching_term_is_uniform(split: Any, data: Any) -> None:
    pytest.importorskip("bm25s")
    model = BM25Retriever().fit(split[0], data.tools)
    ranking = model.rank("xyzzy plugh")
    tools = ranking.probabilities[:-1]
    np.testing.assert_allclose(tools, tools[0])
    assert ranking.probability(END_OF_PLAN) == pytest.approx(model.end_rate_)
    assert "no query term" in ranking.explanation["bm25"]


def test_bm25_softmax_temperature(split: Any, data: Any) -> None:
    pytest.importorskip("bm25s")
    norm = BM25Retriever().fit(split[0], data.tools)
    soft = BM25Retriever(temperature=1.0).fit(split[0], data.tools)
    q = "send a text message"
    assert norm.rank(q).ranked_names()[:3] == soft.rank(q).ranked_names()[:3]
    s = norm.bm25_scores(q)
    expected = s / s.sum() * (1 - norm.end_rate_)
    np.testing.assert_allclose(norm.rank(q).probabilities[:-1], expected)


def test_bm25_large_catalogue_is_vectorised() -> None:
    pytest.importorskip("bm25s")
    import time

    rng = np.random.default_rng(0)
    words = [f"w{i}" for i in range(3000)]
    tools = [Tool(f"tool_{i}", " ".join(rng.choice(words, size=12).tolist())) for i in range(4076)]
    tools.append(Tool("find_sunset_time", "Find the sunset time for a city"))
    demo = Demonstration("when is sunset", ("find_sunset_time",))
    t0 = time.perf_counter()
    model = BM25Retriever().fit([demo], tools)
    fit_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(20):
        model._memo_store = None  # time the scoring, not the memo
        ranking = model.rank("what time is the sunset in Rome")
    rank_ms = (time.perf_counter() - t0) / 20 * 1000
    assert ranking.top(1)[0].name == "find_sunset_time"
    assert fit_s < 10 and rank_ms < 100


# -------------------------------------------------------------------------------------- qts
def test_similarity_probabilities() -> None:
    s = np.array([0.5, -0.2, 0.25])
    np.testing.assert_allclose(similarity_probabilities(s, None), [2 / 3, 0, 1 / 3])
    np.testing.assert_allclose(similarity_probabilities(-s, None)[1], 1.0)
    np.testing.assert_allclose(similarity_probabilities(np.array([-1.0, -2.0]), None), [0.5, 0.5])
    p = similarity_probabilities(s, 0.1)
    assert p.sum() == pytest.approx(1.0)
    assert p[0] > p[2] > p[1]
    with pytest.raises(ValueError, match="temperature"):
        similarity_probabilities(s, 0.0)


def test_qts_ranks_matching_tool_first(enc: Any, split: Any, data: Any) -> None:
    model = QTSRetriever(encoder=enc).fit(split[0], data.tools)
    assert model.rank("Will it rain in Paris tomorrow?").top(1)[0].name == "get_weather"
    assert model.rank("Give me the route to the airport").top(1)[0].name in {
        "maps_show_directions",
        "maps_open_location",
    }
    sims = model.similarities("Set up a zoom call")
    expected = enc.encode(["Set up a zoom call"])[0] @ model.tool_embeddings_.T
    np.testing.assert_allclose(sims, expected, rtol=1e-5, atol=1e-6)


def test_qts_normalised_variant(enc: Any, split: Any, data: Any) -> None:
    model = QTSRetriever(encoder=enc, temperature=None).fit(split[0], data.tools)
    q = "Translate this note into Spanish"
    sims = np.clip(model.similarities(q), 0, None)
    np.testing.assert_allclose(
        model.rank(q).probabilities[:-1], sims / sims.sum() * (1 - model.end_rate_)
    )
    with pytest.raises(ValueError, match="temperature"):
        QTSRetriever(encoder=enc, temperature=-1.0).fit(split[0], data.tools)


# -------------------------------------------------------------------------------------- tgr
def hand_convolution(x: np.ndarray, a: np.ndarray) -> np.ndarray:
    a_tilde = a + np.eye(len(a))
    d = np.diag(1.0 / np.sqrt(a_tilde.sum(axis=1)))
    out: np.ndarray = d @ a_tilde @ d @ x
    return out


def test_graph_convolution_matches_hand_computation() -> None:
    x = np.random.default_rng(0).normal(size=(3, 4))
    a = np.zeros((3, 3))
    a[1, 0] = a[2, 1] = 1.0  # 1 -> 0, 2 -> 1
    np.testing.assert_allclose(graph_convolution(x, [(1, 0), (2, 1)]), hand_convolution(x, a))
    # by hand for node 1: degree 2, neighbour 0 of degree 1
    np.testing.assert_allclose(graph_convolution(x, [(1, 0), (2, 1)])[1], x[1] / 2 + x[0] / 2**0.5)
    np.testing.assert_allclose(graph_convolution(x, []), x)  # no edges: D = I
    # duplicates and self-loops add nothing
    np.testing.assert_allclose(
        graph_convolution(x, [(1, 0), (1, 0), (2, 2), (2, 1)]), hand_convolution(x, a)
    )
    sym = a + a.T
    np.testing.assert_allclose(
        graph_convolution(x, [(1, 0), (0, 1), (2, 1), (1, 2)]), hand_convolution(x, sym)
    )
    with pytest.raises(ValueError, match="outside"):
        graph_convolution(x, [(0, 3)])


TOY_TOOLS = [
    Tool("login", "Log in to the account with a user name and password."),
    Tool("validate", "Validate the session token of the logged-in user."),
    Tool("update_email", "Change the email address of the user's account."),
]
TOY_DEMOS = [
    Demonstration("change my email to a@b.c", ("login", "validate", "update_email")),
    Demonstration("log me in", ("login",)),
]


@pytest.mark.parametrize(
    ("direction", "entries"),
    [
        ("to_prerequisite", [(1, 0), (2, 1)]),
        ("to_dependent", [(0, 1), (1, 2)]),
        ("undirected", [(1, 0), (2, 1), (0, 1), (1, 2)]),
    ],
)
def test_tgr_convolves_demonstration_graph(
    enc: Any, direction: str, entries: list[tuple[int, int]]
) -> None:
    model = ToolGraphRetriever(encoder=enc, direction=direction).fit(TOY_DEMOS, TOY_TOOLS)  # type: ignore[arg-type]
    np.testing.assert_array_equal(model.edges_, [[0, 1], [1, 2]])  # (prerequisite, dependent)
    a = np.zeros((3, 3))
    for i, j in entries:
        a[i, j] = 1.0
    x = model.tool_embeddings_.astype(np.float64)
    np.testing.assert_allclose(model.graph_embeddings_, hand_convolution(x, a), rtol=1e-6)
    sims = model.similarities("update my email")
    unit = model.graph_embeddings_ / np.linalg.norm(model.graph_embeddings_, axis=1)[:, None]
    np.testing.assert_allclose(sims, unit @ enc.encode(["update my email"])[0], rtol=1e-5)


def test_tgr_graph_sources_and_explicit_graph(enc: Any) -> None:
    demos = [
        Demonstration("q1", ("login", "validate", "update_email"), edges=((0, 2),)),
        Demonstration("q2", ("validate", "login"), edges=()),
    ]
    assert dependency_pairs(demos, "calls") == [
        ("login", "validate"),
        ("validate", "login"),
        ("validate", "update_email"),
    ]
    assert dependency_pairs(demos, "edges") == [("login", "update_email")]
    from_edges = ToolGraphRetriever(encoder=enc, graph_source="edges").fit(demos, TOY_TOOLS)
    explicit = ToolGraphRetriever(encoder=enc, graph=[("login", "update_email")]).fit(
        TOY_DEMOS, TOY_TOOLS
    )
    np.testing.assert_array_equal(explicit.edges_, [[0, 2]])
    np.testing.assert_allclose(explicit.graph_embeddings_, from_edges.graph_embeddings_)
    with pytest.warns(UserWarning, match="outside the catalogue"):
        ToolGraphRetriever(encoder=enc, graph=[("login", "nope"), ("login", "validate")]).fit(
            TOY_DEMOS, TOY_TOOLS
        )
    with pytest.raises(ValueError, match="direction"):
        ToolGraphRetriever(encoder=enc, direction="sideways").fit(TOY_DEMOS, TOY_TOOLS)  # type: ignore[arg-type]


def test_tgr_explicit_graph_survives_save(enc: Any, tmp_path: Any) -> None:
    model = ToolGraphRetriever(encoder=enc, graph=[("login", "update_email")])
    model.fit(TOY_DEMOS, TOY_TOOLS)
    loaded = ToolRetriever.load(model.save(tmp_path / "tgr"))
    assert isinstance(loaded, ToolGraphRetriever)
    np.testing.assert_array_equal(loaded.edges_, model.edges_)
    np.testing.assert_allclose(loaded.graph_embeddings_, model.graph_embeddings_)


# -------------------------------------------------------------------------------------- lim
def test_lim_asks_once_per_query_and_uses_the_answer(enc: Any, split: Any, data: Any) -> None:
    query = "Help me get ready for the trip"
    chat = ScriptedChat(
        {
            query: "```json\n"
            + json.dumps(
                {"tools": [{"name": "weather_lookup", "description": "Get the weather forecast"}]}
            )
            + "\n```"
        }
    )
    model = LessIsMoreRetriever(chat_model=chat, encoder=enc).fit(split[0], data.tools)
    assert chat.calls == []  # fit asks nothing
    first = model.rank(query)
    for history in ([], ["get_weather"], ["get_weather", "create_reminder"]):
        np.testing.assert_array_equal(model.rank(query, history).probabilities, first.probabilities)
    assert chat.asked() == [query]
    role, system = chat.calls[0][0]
    assert role == "system" and "ideal" in system
    assert first.top(1)[0].name == "get_weather"
    assert "weather lookup: Get the weather forecast" in first.explanation["ideal_tools"]
    assert model.ideal_tools(query) == chat.script[query]
    assert len(chat.calls) == 1


def test_lim_match_each_scores_best_ideal_tool(enc: Any, split: Any, data: Any) -> None:
    answer = json.dumps(
        {
            "tools": [
                {"name": "directions", "description": "Show travel directions on a map"},
                {"name": "sms", "description": "Send a text message to a phone number"},
            ]
        }
    )
    chat = ScriptedChat({"q": answer})
    model = LessIsMoreRetriever(chat_model=chat, encoder=enc, match="each")
    model.fit(split[0], data.tools)
    top2 = {t.name for t in model.rank("q").top(2, include_end=False)}
    assert top2 == {"maps_show_directions", "send_sms"}
    descs = parse_ideal_tools(answer)
    expected = (enc.encode(descs) @ model.tool_embeddings_.T).max(axis=0)
    np.testing.assert_allclose(model.similarities("q"), expected, rtol=1e-5, atol=1e-6)


def test_lim_without_chat_model(enc: Any, split: Any, data: Any, tmp_path: Any) -> None:
    reason = LessIsMoreRetriever.unavailable_reason()
    assert reason is not None and "chat model" in reason
    assert LessIsMoreRetriever.unavailable_reason(chat_model=ScriptedChat()) is None
    with pytest.raises(ChatModelError, match="needs a chat model"):
        LessIsMoreRetriever(encoder=enc).fit(split[0], data.tools)
    with pytest.raises(ChatModelError, match="invoke"):
        LessIsMoreRetriever(chat_model=object(), encoder=enc).fit(split[0], data.tools)  # type: ignore[arg-type]
    path = LessIsMoreRetriever(chat_model=ScriptedChat(), encoder=enc).fit(split[0], data.tools)
    saved = path.save(tmp_path / "lim")
    with pytest.raises(ChatModelError, match="chat_model"):
        LessIsMoreRetriever.load(saved)
    generic = ToolRetriever.load(saved)
    with pytest.raises(ChatModelError, match="set_params"):
        generic.rank("anything")
    generic.set_params(chat_model=ScriptedChat())
    assert generic.rank("anything").probabilities.sum() == pytest.approx(1.0)


def test_lim_empty_answer_falls_back_to_query(enc: Any, split: Any, data: Any) -> None:
    chat = ScriptedChat({"Will it rain in Paris tomorrow?": "   "})
    model = LessIsMoreRetriever(chat_model=chat, encoder=enc).fit(split[0], data.tools)
    ranking = model.rank("Will it rain in Paris tomorrow?")
    assert ranking.top(1)[0].name == "get_weather"
    assert "embedded the query" in ranking.explanation["ideal_tools"]


def test_lim_chat_failure_is_a_chat_model_error(enc: Any, split: Any, data: Any) -> None:
    class Broken:
        def invoke(self, messages: list[tuple[str, str]], /) -> Any:
            raise ConnectionError("server down")

    model = LessIsMoreRetriever(chat_model=Broken(), encoder=enc).fit(split[0], data.tools)
    with pytest.raises(ChatModelError, match="server down"):
        model.rank("book a flight")


def test_parse_ideal_tools() -> None:
    assert parse_ideal_tools('{"tools": [{"name": "get_x", "description": "Gets x."}]}') == [
        "get x: Gets x."
    ]
    assert parse_ideal_tools('Sure!\n[{"description": "Gets y."}, "z tool"]') == [
        "Gets y.",
        "z tool",
    ]
    assert parse_ideal_tools("A tool that books flights.") == ["A tool that books flights."]
    assert parse_ideal_tools("{not json}") == ["{not json}"]
    assert parse_ideal_tools("  ") == []


# ------------------------------------------------------------------------------------- chat
def test_message_text_shapes() -> None:
    from langchain_core.messages import AIMessage

    assert message_text("plain") == "plain"
    assert message_text(AIMessage(content="hello")) == "hello"
    blocks = [{"type": "reasoning", "reasoning": "hmm"}, {"type": "text", "text": "hi"}, " there"]
    assert message_text(AIMessage(content=blocks)) == "hi there"  # type: ignore[arg-type]
    assert message_text({"content": "from a dict"}) == "from a dict"
    assert message_text({"content": None}) == ""
    with pytest.raises(ChatModelError):
        message_text(42)
    with pytest.raises(ChatModelError):
        message_text({"text": "no content key"})


def test_langchain_chat_model_satisfies_protocol() -> None:
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    llm = FakeListChatModel(responses=['{"tools": [{"name": "a", "description": "b"}]}'])
    assert isinstance(llm, ChatModel)
    assert invoke_text(llm, [("system", "s"), ("human", "q")]).startswith('{"tools"')


def test_openai_chat_adapter_with_fake_client() -> None:
    class Completions:
        def __init__(self) -> None:
            self.kwargs: dict[str, Any] = {}

        def create(self, **kwargs: Any) -> Any:
            self.kwargs = kwargs
            message = type("M", (), {"content": "the answer"})()
            return type("R", (), {"choices": [type("C", (), {"message": message})()]})()

    completions = Completions()
    client = type("Client", (), {"chat": type("Chat", (), {"completions": completions})()})()
    llm = OpenAIChat("tiny", client=client, max_tokens=64)
    assert isinstance(llm, ChatModel)
    assert llm.invoke([("system", "s"), ("human", "q"), ("ai", "a")]) == "the answer"
    assert completions.kwargs["messages"] == [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
    ]
    assert completions.kwargs["model"] == "tiny"
    assert completions.kwargs["temperature"] == 0.0
    assert completions.kwargs["max_tokens"] == 64
    with pytest.raises(ChatModelError, match="role"):
        llm.invoke([("wizard", "x")])


# --------------------------------------------------------------------------------- peer-gtc
def test_rank_probabilities() -> None:
    p = rank_probabilities(5, [3, 1], 0.05)
    assert p.sum() == pytest.approx(1.0)
    assert p[3] > p[1] > p[0] == p[2] == p[4]
    assert p[1] / p[3] == pytest.approx(0.5)
    np.testing.assert_allclose(rank_probabilities(3, [], 0.05), 1 / 3)
    full = rank_probabilities(3, [2, 0, 1], 0.05)
    np.testing.assert_allclose(full, np.array([1 / 2, 1 / 3, 1]) / (11 / 6))
    tight = rank_probabilities(3, [0, 1], 0.9)  # the unranked tool stays below the ranked ones
    assert tight[2] < tight[1] < tight[0]


def test_peer_gtc_learns_relations_and_uses_history(split: Any, data: Any) -> None:
    pytest.importorskip("graph_tool_call")
    train, test = split
    model = GraphToolCallRetriever().fit(train, data.tools)
    observed = {p for d in train for p in zip(d.calls, d.calls[1:], strict=False) if p[0] != p[1]}
    assert set(model.relations_) == observed
    assert GraphToolCallRetriever.unavailable_reason() is None
    changed = 0
    for d in test[:10]:
        base = model.rank(d.query).ranked_names()
        changed += any(model.rank(d.query, s.history).ranked_names() != base for s in d.steps())
    assert changed > 0
    sparse = GraphToolCallRetriever(min_count=10**6, detect_dependencies=False).fit(
        train, data.tools
    )
    assert sparse.relations_ == []


def test_peer_gtc_with_tfidf_fits_and_loads_the_same(split: Any, data: Any, tmp_path: Any) -> None:
    """TF-IDF is fitted on the saved catalogue, so the loaded model embeds as the fit did."""
    pytest.importorskip("graph_tool_call")
    from dtdr_agents.retrievers import load_retriever

    train, test = split
    model = GraphToolCallRetriever(encoder="tfidf").fit(train, data.tools)
    model.save(tmp_path / "m")
    loaded = load_retriever(tmp_path / "m")
    for d in test[:5]:
        for s in d.steps():
            got, want = loaded.rank(d.query, s.history), model.rank(d.query, s.history)
            assert got.ranked_names() == want.ranked_names()
