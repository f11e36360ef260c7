"""Parameter filling end to end (the paper's SR, Appendix D and Algorithm 2).

The scoring rules are checked as pure functions; the loaders' recorded arguments against the
raw files; the run through the loopback OpenAI server (tests/openai_server.py) with the real
`openai` client and a scripted model that selects every function right and fills arguments
right, wrong, with a bad type, or not at all (an error body).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from openai_server import OpenAIChatServer, clear_proxies, history_of, tool_names

from dtdr_agents.datasets import load_train_test
from dtdr_agents.evaluation.e2e import (
    StepCache,
    dry_run_report,
    format_e2e_markdown,
    prepare_e2e,
    run_e2e,
)
from dtdr_agents.evaluation.e2e.arguments import check_signature, normalise, score_arguments
from dtdr_agents.evaluation.e2e.protocol import END_TOOL
from dtdr_agents.foundation.chat import OpenAIChat
from dtdr_agents.foundation.encoders import get_encoder
from dtdr_agents.foundation.errors import InvalidDemonstrationError
from dtdr_agents.foundation.retry import RetryPolicy
from dtdr_agents.foundation.types import CallArguments, Demonstration
from dtdr_agents.runtime.prompting import get_token_counter

FIXTURES = Path(__file__).parent / "fixtures" / "datasets"
SEAL = FIXTURES / "sealtools"
FAST = RetryPolicy(max_retries=1, base_delay=0.0, jitter=0.0, timeout=10.0)
BOOK = {
    "type": "object",
    "properties": {"restaurant_id": {"type": "string"}, "people": {"type": "integer"}},
    "required": ["restaurant_id", "people"],
}


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_proxies(monkeypatch)


# ------------------------------------------------------------------------------ scoring
def test_normalisation_is_the_documented_one() -> None:
    assert normalise("  New   York ") == normalise("new york")
    assert normalise("85") == normalise(85) == normalise(85.0)
    assert normalise("TRUE") == normalise(True) != normalise("false")
    assert normalise(1) != normalise(True)  # a boolean is never a number (1 == True in Python)
    assert normalise([1, "x"]) != normalise([True, "x"])
    assert normalise({"a": None, "b": [" X "]}) == normalise({"b": ["x"]})
    assert normalise(["a", "b"]) != normalise(["b", "a"])  # lists keep their order


def test_a_bad_type_fails_the_step_with_a_reason_never_a_crash() -> None:
    gold = [{"restaurant_id": "API_call_0", "people": 2}]
    right = score_arguments('{"restaurant_id": "api_call_0", "people": "2"}', gold, BOOK)
    assert right.match and right.reason is None
    for raw, reason in [
        ('{"restaurant_id": "API_call_0", "people": "two"}', "type: 'people'"),
        ('{"restaurant_id": "API_call_0", "people": 2.5}', "type: 'people'"),
        ('{"restaurant_id": "API_call_0", "people": 3}', "mismatch: 'people'"),
        ('{"restaurant_id": "API_call_0"}', "missing required argument(s) 'people'"),
        ('{"restaurant_id": "x", "people": 2, "when": "now"}', "unknown argument(s) 'when'"),
        ("{not json", "not a JSON object"),
        ("[1, 2]", "not a JSON object"),
        (None, "not a JSON object"),
        (42, "not a JSON object"),
    ]:
        score = score_arguments(raw, gold, BOOK)
        assert not score.match and score.reason is not None and score.reason.startswith(reason)


def test_failures_are_counted_by_their_documented_class() -> None:
    from dtdr_agents.evaluation.e2e.metrics import summarize

    gold = [{"restaurant_id": "API_call_0", "people": 2}]
    answers = {
        "json": "{not json",
        "unknown": '{"restaurant_id": "x", "people": 2, "when": "now"}',
        "missing": '{"restaurant_id": "API_call_0"}',
        "type": '{"restaurant_id": "API_call_0", "people": "two"}',
        "mismatch": '{"restaurant_id": "API_call_0", "people": 3}',
    }
    scores = {k: score_arguments(raw, gold, BOOK) for k, raw in answers.items()}
    assert {k: s.kind for k, s in scores.items()} == {k: k for k in answers}
    rows = [
        {
            "plan": i,
            "step": 0,
            "kind": "tool",
            "correct": True,
            "is_end": False,
            "prompt_tokens": 1,
            "called": "bookTable",
            "has_arguments": True,
            "args": {"match": s.match, "reason": s.reason, "kind": s.kind},
        }
        for i, s in enumerate(scores.values())
    ]
    assert summarize(rows)["argument_failures"] == {k: 1 for k in answers}


def test_references_fit_any_type_and_the_gold_decides_where_it_breaks_its_signature() -> None:
    # "$var1.size$" names an earlier result: it fits an integer argument.
    assert check_signature({"restaurant_id": "a", "people": "$var1.size$"}, BOOK, ["var1"]) is None
    assert check_signature({"restaurant_id": "a", "people": "$var10$"}, BOOK, ["var1"])
    # The published gold value breaks the schema ("per month" for a number): a copy passes.
    schema = {"type": "object", "properties": {"f": {"type": "number"}}}
    assert score_arguments('{"f": "Per  Month"}', [{"f": "per month"}], schema).match
    assert not score_arguments('{"f": "weekly"}', [{"f": "per month"}], schema).match
    # Any of several acceptable calls of the same function counts.
    assert score_arguments({"f": 2}, [{"f": 1}, {"f": 2}], schema).match


def test_call_arguments_are_validated_and_aligned_with_the_calls() -> None:
    with pytest.raises(InvalidDemonstrationError, match="2 entries for 1 calls"):
        Demonstration("q", ("a",), arguments=(CallArguments.of({}), CallArguments.of({})))
    with pytest.raises(InvalidDemonstrationError, match="JSON object"):
        CallArguments("[1]")
    with pytest.raises(InvalidDemonstrationError, match="not plain JSON"):
        CallArguments.of({"x": float("nan")})
    demo = Demonstration("q", ("a",), arguments=(CallArguments.of({"b": 1, "a": "x"}, "v1"),))
    assert demo.arguments is not None and demo.arguments[0].json == '{"a": "x", "b": 1}'
    assert demo.to_dict()["calls"] == [
        {"name": "a", "arguments": {"a": "x", "b": 1}, "label": "v1"}
    ]


# ------------------------------------------------------------------------------ loaders
def _raw(path: Path) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Plan id -> (api, parameters) straight from a Seal-Tools file, in the recorded order."""
    out = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        out[record["id"]] = [(c["api"], c["parameters"]) for c in record["calling"]]
    return out


def test_sealtools_arguments_follow_the_calls_when_a_plan_is_reordered() -> None:
    _, test = load_train_test("sealtools", SEAL, train_split="test_in_domain", test_split="dev")
    raw = _raw(SEAL / "dev.jsonl")
    reordered = 0
    for demo in test.demos:
        assert demo.arguments is not None and demo.id is not None
        got = [(c, a.values()) for c, a in zip(demo.calls, demo.arguments, strict=True)]
        assert sorted(json.dumps(x, sort_keys=True) for x in got) == sorted(
            json.dumps(x, sort_keys=True) for x in raw[demo.id]
        )
        reordered += got != raw[demo.id]
        for call, args in got:  # each call keeps its own arguments
            assert (call, args) in raw[demo.id]
    assert reordered == 1  # dev-difficult-1 lists bookTable before the search it needs
    labels = {a.label for d in test.demos for a in d.arguments or ()}
    assert "API_call_0" in labels


def test_taskbench_reads_published_arguments_or_loads_without_them(tmp_path: Path) -> None:
    src = FIXTURES / "taskbench" / "data_tiny"
    folder = tmp_path / "data_tiny"
    folder.mkdir()
    for name in ("tool_desc.json", "graph_desc.json", "user_requests.json"):
        if (src / name).exists():
            (folder / name).write_text((src / name).read_text())
    rows = [json.loads(x) for x in (src / "data.json").read_text().splitlines() if x.strip()]
    rows[1]["task_nodes"][0]["arguments"] = ["<node-1>"]  # Translation takes the caption
    rows[1]["task_nodes"][1]["arguments"] = ["photo.jpg"]
    (folder / "data.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    data = load_train_test("taskbench", folder, seed=0)
    demos = {d.id: d for d in [*data[0].demos, *data[1].demos]}
    demo = demos[str(rows[1]["id"])]
    assert demo.calls == ("Image Captioning", "Translation")  # put in dependency order
    assert demo.arguments is not None
    assert [a.values() for a in demo.arguments] == [{"image": "photo.jpg"}, {"text": "<node-1>"}]
    assert [a.label for a in demo.arguments] == ["<node-1>", "<node-0>"]
    assert all(d.arguments is None for i, d in demos.items() if i != str(rows[1]["id"]))
    schema = data[0].tools.get("Translation")
    assert schema is not None and schema.parameters["required"] == ["text"]


# ------------------------------------------------------------------------------ runs
class ArgumentModel:
    """Selects every next call right; fills arguments from the raw file, with set mistakes."""

    def __init__(self, mistakes: dict[tuple[str, str], Any], error_body: bool = False) -> None:
        self.plans: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for line in (SEAL / "dev.jsonl").read_text().splitlines():
            record = json.loads(line)
            self.plans[record["query"]] = [(c["api"], c["parameters"]) for c in record["calling"]]
        self.mistakes = mistakes
        self.error_body = error_body
        self.lock = threading.Lock()
        self.argument_bodies: list[dict[str, Any]] = []

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        query, history = history_of(body)
        forced = body.get("tool_choice")
        if isinstance(forced, dict):  # a parameter-filling request
            with self.lock:
                self.argument_bodies.append(body)
            if self.error_body:
                return {"raw": json.dumps({"error": {"message": "overloaded"}})}
            name = forced["function"]["name"]
            if (query, name) in self.mistakes:
                return {"tool_calls": [{"name": name, "arguments": self.mistakes[(query, name)]}]}
            done = [n for n in history]
            gold = [a for c, a in self.plans[query] if c == name]
            return {"tool_calls": [{"name": name, "arguments": gold[done.count(name)]}]}
        remaining = [c for c, _ in self.plans[query]]
        for name in history:
            remaining.remove(name)
        ready = [n for n in tool_names(body) if n in remaining]
        if not remaining:
            return {"tool_calls": [{"name": END_TOOL, "arguments": {}}]}
        return {"tool_calls": [{"name": ready[0] if ready else remaining[0], "arguments": {}}]}


def _plan() -> Any:
    train, test = load_train_test("sealtools", SEAL, train_split="test_in_domain", test_split="dev")
    return prepare_e2e(
        train,
        test,
        ["none"],
        ["no_icl"],
        encoder=get_encoder("tfidf"),
        counter=get_token_counter("approx"),
    )


ROME = "Find an Italian place in Rome and book it for 2; also the Rome weather."
PARIS = "Book the place from the first search for 4."


def test_sr_with_arguments_through_a_real_endpoint(tmp_path: Path) -> None:
    plan = _plan()
    assert plan.builder.has_arguments
    model = ArgumentModel(
        {(ROME, "bookTable"): {"restaurant_id": "API_call_0", "people": "two"}}  # bad type
    )
    cache = StepCache(tmp_path / "steps.jsonl")
    with OpenAIChatServer(model) as server:
        chat = OpenAIChat("scripted", base_url=server.base_url, retry=FAST)
        report = run_e2e(plan, chat, cache=cache, concurrency=2)
    (cell,) = report["results"]
    n_plans = len(plan.builder.test)
    n_tool_steps = sum(len(d.calls) for d in plan.builder.test)
    assert cell["sr"] == 1.0 and cell["fsa"] == 1.0  # selection is right everywhere
    assert cell["sr_full"] == pytest.approx((n_plans - 1) / n_plans)  # Rome's booking failed
    assert cell["n_argument_answers"] == n_tool_steps == report["argument_calls"]
    # Rome: after the search, booking and the weather may both come next; the model books at
    # both of those steps (teacher forcing follows the recorded order), so two fail.
    assert cell["argument_accuracy"] == pytest.approx((n_tool_steps - 2) / n_tool_steps)
    assert cell["argument_failures"] == {"type": 2}
    # The prompt: request, the calls so far with their recorded arguments and labels, and the
    # one function, forced.
    paris = [b for b in model.argument_bodies if history_of(b)[0] == PARIS]
    book = next(b for b in paris if b["tool_choice"]["function"]["name"] == "bookTable")
    assert tool_names(book) == ["bookTable"]
    shown = [m for m in book["messages"] if m.get("tool_calls")]
    call = shown[0]["tool_calls"][0]["function"]
    assert call["name"] == "findRestaurant" and json.loads(call["arguments"]) == {"city": "Paris"}
    assert any("API_call_0" in str(m.get("content")) for m in book["messages"])
    assert "SR % (function + arguments)" in format_e2e_markdown(report)
    # A second run reuses every answer, parameter filling included.
    with OpenAIChatServer(model) as server:
        chat = OpenAIChat("scripted", base_url=server.base_url, retry=FAST)
        again = run_e2e(plan, chat, cache=StepCache(tmp_path / "steps.jsonl"))
    assert again["calls"] == 0 and again["argument_calls"] == 0
    assert again["argument_cached"] == n_tool_steps
    assert again["results"][0]["sr_full"] == cell["sr_full"]


def test_an_argument_error_body_is_an_endpoint_fault_not_cached(tmp_path: Path) -> None:
    plan = _plan()
    cache_path = tmp_path / "steps.jsonl"
    with OpenAIChatServer(ArgumentModel({}, error_body=True)) as server:
        chat = OpenAIChat("scripted", base_url=server.base_url, retry=FAST)
        report = run_e2e(plan, chat, cache=StepCache(cache_path), concurrency=2)
    (cell,) = report["results"]
    n_tool_steps = sum(len(d.calls) for d in plan.builder.test)
    assert cell["n_argument_errors"] == n_tool_steps
    assert cell["argument_errors"] == {"endpoint": n_tool_steps}
    assert cell["sr_full"] is None  # no plan got its arguments answered
    assert cell["sr"] == 1.0
    rows = [json.loads(x) for x in cache_path.read_text().splitlines()]
    assert rows and all(r["retriever"] != "<arguments>" for r in rows)


def test_dry_run_lists_the_parameter_filling_prompts() -> None:
    plan = _plan()
    report = dry_run_report(plan)
    listing = report["arguments"]
    # One per step and function that may come next (Rome's DAG offers two after the search).
    expected = sum(len(s.acceptable - {END_TOOL}) for s in plan.builder.steps)
    assert expected > sum(len(d.calls) for d in plan.builder.test)
    assert listing["scored"] and listing["prompts"] == expected
    assert {p["function"] for p in listing["list"]} == {
        "getWeather",
        "findRestaurant",
        "bookTable",
    }
    text = format_e2e_markdown(report)
    assert f"parameter filling: {expected} prompts" in text
    assert "the first prompt" in text and "[system] You fill in the arguments" in text


def test_cli_dry_run_on_taskbench_hf_lists_prompts(
    shared_datasets: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dtdr_agents import cli

    out = tmp_path / "dry.json"
    argv = ["e2e", "--dataset", "taskbench", "--path", str(shared_datasets / "taskbench_hf_subset")]
    argv += ["--skip-bad", "--dry-run", "--retrievers", "none", "--encoder", "tfidf"]
    assert cli.main([*argv, "--tokens", "approx", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "parameter filling:" in printed and "not scored" in printed
    listing = json.loads(out.read_text())["arguments"]
    assert listing["prompts"] > 600 and listing["scored"] is False
    first = listing["examples"][0]
    assert first["tools"][0]["function"]["parameters"]["required"]


def test_cli_exits_1_when_parameter_filling_got_no_answer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dtdr_agents import cli

    argv = ["e2e", "--dataset", "sealtools", "--path", str(SEAL), "--retrievers", "none"]
    argv += ["--train-split", "test_in_domain", "--test-split", "dev", "--encoder", "tfidf"]
    argv += ["--no-cache", "--tokens", "approx", "--max-retries", "0", "-q"]
    steps = tmp_path / "steps.jsonl"
    with OpenAIChatServer(ArgumentModel({}, error_body=True)) as server:
        rc = cli.main(
            [*argv, "--base-url", server.base_url, "--model", "m", "--step-cache", str(steps)]
        )
    assert rc == 1
    assert "for the function or its arguments" in capsys.readouterr().err
    with OpenAIChatServer(ArgumentModel({})) as server:
        rc = cli.main(
            [*argv, "--base-url", server.base_url, "--model", "m", "--step-cache", str(steps)]
        )
    assert rc == 0  # the faults were not cached: the second run asked again and got answers
