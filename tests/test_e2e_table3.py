"""The paper's Table 3 harness (issue 23) through real HTTP on the loopback OpenAI server.

`--test-limit` keeps every demonstration; `hybrid@0demos` fits on none and prompts with none;
every figure has a bootstrap interval over test plans and the paired comparisons have the
right sign; `--replay` reproduces a run from its step cache alone and names a missing step;
`--max-prompt-tokens` refuses a cell with the measured sizes; a server dying mid-run stops it
with a clear error while every answer received stays cached, and the next run sends no request
twice.

The scripted model (`Scripted`) on the synthetic demo dataset (40 samples: 28 training plans,
12 test plans): with every tool bound (no_icl) it answers the first step of every odd test plan
with text; otherwise it calls the recorded next tool (bound or not), so a retriever's SR is 1
and no_icl's is 1/2.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from openai_server import OpenAIChatServer, _Handler, clear_proxies, history_of, tool_names

from dtdr_agents import cli
from dtdr_agents.datasets import load_train_test
from dtdr_agents.datasets.base import Dataset
from dtdr_agents.evaluation.bench import build_retriever
from dtdr_agents.evaluation.e2e import (
    E2EPlan,
    EndpointUnreachableError,
    ReplayChat,
    StepCache,
    StepNotCachedError,
    api_names,
    plan_sums,
    prepare_e2e,
    run_e2e,
)
from dtdr_agents.evaluation.e2e.protocol import END_TOOL
from dtdr_agents.foundation.chat import OpenAIChat
from dtdr_agents.foundation.encoders import get_encoder
from dtdr_agents.foundation.retry import RetryPolicy
from dtdr_agents.foundation.selection import select
from dtdr_agents.runtime.icl import EXAMPLE_HEADER
from dtdr_agents.runtime.prompting import get_token_counter

FAST = RetryPolicy(max_retries=1, base_delay=0.0, jitter=0.0, timeout=10.0)
LIMIT = 40
BASE = [
    "e2e",
    *("--dataset", "demo", "--limit", str(LIMIT), "--encoder", "tfidf", "--no-cache"),
    *("--tokens", "approx", "-q", "--n-boot", "300"),
]


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_proxies(monkeypatch)


@pytest.fixture(scope="module")
def split() -> tuple[Dataset, Dataset]:
    return load_train_test("demo", None, seed=0, limit=LIMIT)


class Scripted:
    """The scripted model (see the module docstring)."""

    def __init__(self, test: Dataset) -> None:
        names = api_names(test.tools.names)
        self.n_tools = len(test.tools)
        self.plans = {d.query: [names[c] for c in d.calls] for d in test.demos}
        self.odd = {d.query for i, d in enumerate(test.demos) if i % 2}
        self.lock = threading.Lock()
        self.systems: list[str] = []

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        query, history = history_of(body)
        offered = tool_names(body)
        with self.lock:
            self.systems.append(body["messages"][0]["content"])
        plan = self.plans[query]
        if len(history) >= len(plan):
            return {"tool_calls": [{"name": END_TOOL, "arguments": {}}]}
        every_tool = len(offered) == self.n_tools + 1
        if every_tool and query in self.odd and not history:
            return {"content": "I would do it differently."}
        return {"tool_calls": [{"name": plan[len(history)], "arguments": {}}]}


class _ClosingHandler(_Handler):
    protocol_version = "HTTP/1.0"  # one request per connection: a stopped server refuses the next


def dying_server(responder: Any, answers: int) -> OpenAIChatServer:
    """A loopback server that stops listening once it has answered `answers` requests."""
    state = {"n": 0}
    server: OpenAIChatServer

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        state["n"] += 1
        if state["n"] == answers:  # answer this one, refuse every later connection
            server._server.shutdown()
            server._server.server_close()
        return dict(responder(body))

    server = OpenAIChatServer(respond)
    server._server.RequestHandlerClass = _ClosingHandler
    return server


def plan_for(split: tuple[Dataset, Dataset], retrievers: list[str]) -> E2EPlan:
    train, test = split
    from dtdr_agents.cli.bench import first_demos

    return prepare_e2e(
        train,
        test,
        retrievers,
        ["no_icl", "hard_weighted"],
        encoder=get_encoder("tfidf"),
        k=3,
        counter=get_token_counter("approx"),
        zero_train=first_demos(train, test, 0)[0],
    )


def cell(report: dict[str, Any], rid: str, mode: str) -> dict[str, Any]:
    (found,) = [r for r in report["results"] if r["retriever"] == rid and r["mode"] == mode]
    return found


def test_test_limit_keeps_every_demonstration(tmp_path: Path) -> None:
    full = tmp_path / "full.json"
    cut = tmp_path / "cut.json"
    common = [*BASE, "--retrievers", "none", "--dry-run", "--no-step-cache"]
    assert cli.main([*common, "--json", str(full)]) == 0
    assert cli.main([*common, "--test-limit", "5", "--json", str(cut)]) == 0
    a, b = json.loads(full.read_text()), json.loads(cut.read_text())
    assert a["n_test"] == 12 and b["n_test"] == 5 and b["test_limit"] == 5
    assert b["n_train"] == a["n_train"] == 28  # every demonstration kept
    _, test = load_train_test("demo", None, seed=0, limit=LIMIT)
    steps = sum(len(d.calls) + 1 for d in test.demos[:5])  # the first 5 plans, end included
    assert b["n_steps"] == steps < a["n_steps"]
    # --limit instead cuts the samples before the split: fewer demonstrations
    assert cli.main([*common, "--limit", "20", "--json", str(cut)]) == 0
    assert json.loads(cut.read_text())["n_train"] < 28


def test_test_sample_is_seeded_keeps_demonstrations_and_excludes_test_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    common = [*BASE, "--retrievers", "none", "--dry-run", "--no-step-cache"]
    ids = []
    for seed in ("0", "0", "1"):
        out = tmp_path / f"s{seed}.json"
        argv = [*common, "--test-sample", "5", "--seed", seed, "--json", str(out)]
        assert cli.main(argv) == 0
        report = json.loads(out.read_text())
        assert report["n_test"] == 5 and report["test_sample"] == 5
        assert report["n_train"] == (28 if seed == "0" else report["n_train"])
        ids.append([a["plan_id"] for a in report["arguments"]["list"]])
    assert ids[0] == ids[1]  # the same seed draws the same plans
    _, test = load_train_test("demo", None, seed=0, limit=LIMIT)
    order = [d.id for d in test.demos]
    drawn = list(dict.fromkeys(ids[0]))
    assert drawn == sorted(drawn, key=order.index)  # kept in the split's order
    assert drawn != order[: len(drawn)] or ids[0] != ids[2]  # a draw, not the first plans
    with pytest.raises(SystemExit):
        cli.main([*common, "--test-sample", "5", "--test-limit", "5"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_zero_demo_row_fits_on_no_demonstrations(split: tuple[Dataset, Dataset]) -> None:
    train, _ = split
    plan = plan_for(split, ["hybrid", "hybrid@0demos"])
    assert plan.n_demos == {"none": 28, "hybrid": 28, "hybrid@0demos": 0}
    assert ("hybrid@0demos", "hard_weighted") in plan.cells
    zero = [r for r in plan.requests if r.retriever == "hybrid@0demos"]
    full = [r for r in plan.requests if r.retriever == "hybrid"]
    assert len(zero) == len(full) == len(plan.builder.steps)
    assert all(EXAMPLE_HEADER not in r.messages[0]["content"] for r in zero)
    assert all(EXAMPLE_HEADER in r.messages[0]["content"] for r in full)
    # its retrieval is that of a hybrid fitted on no demonstrations, computed apart
    fresh, _ = build_retriever("hybrid", encoder=get_encoder("tfidf"), seed=0, dataset=train)
    assert fresh is not None
    fresh.fit([], train.tools)
    names = plan.builder.names
    back = {v: k for k, v in names.items()}
    for req in zero[:8]:
        ranking = fresh.rank(req.step.query, [back[h] for h in req.step.history])
        top = [names[n] for n in select(ranking, plan.builder.policy).names]
        assert list(req.preferred) == top


def test_zero_demo_spec_errors(
    split: tuple[Dataset, Dataset], capsys: pytest.CaptureFixture[str]
) -> None:
    train, test = split
    with pytest.raises(ValueError, match="fits on no demonstrations: pass zero_train"):
        prepare_e2e(
            train,
            test,
            ["hybrid@0demos"],
            ["hard_weighted"],
            encoder=get_encoder("tfidf"),
            counter=get_token_counter("approx"),
        )
    assert cli.main([*BASE, "--retrievers", "none@0demos", "--dry-run"]) == 2
    assert "--retrievers: retriever spec 'none@0demos'" in capsys.readouterr().err


def test_intervals_contain_the_point_and_paired_signs(split: tuple[Dataset, Dataset]) -> None:
    plan = plan_for(split, ["none", "bm25", "hybrid", "hybrid@0demos"])
    scripted = Scripted(split[1])
    with OpenAIChatServer(scripted) as server:
        chat = OpenAIChat("scripted", base_url=server.base_url, retry=FAST)
        report = run_e2e(plan, chat, concurrency=2, n_boot=500)
    assert any(EXAMPLE_HEADER not in s for s in scripted.systems)  # the zero-demo prompts
    none = cell(report, "none", "no_icl")
    assert none["sr"] == 0.5 and none["no_call_rate"] == 6 / none["n_answered"]
    for result in report["results"]:
        iv = result["intervals"]
        for figure in ("fsa", "sr", "no_call_rate", "prompt_tokens", "latency_ms"):
            point, (lo, hi) = iv[figure]["value"], iv[figure]["ci"]
            assert lo <= point <= hi, (result["retriever"], figure)
            summary = result[figure] if figure != "latency_ms" else result[figure]["mean"]
            assert point == pytest.approx(summary)
        assert iv["sr_full"]["value"] is None  # the demo plans record no arguments
        assert result["n_demos"] == (0 if result["retriever"] == "hybrid@0demos" else 28)
    comps = {(c["a"], c["b"]): c for c in report["comparisons"]}
    versus_none = comps[("hybrid/hard_weighted", "none/no_icl")]
    hybrid = cell(report, "hybrid", "hard_weighted")
    assert versus_none["sr_diff"]["value"] == pytest.approx(hybrid["sr"] - none["sr"])
    assert versus_none["sr_diff"]["value"] > 0 and versus_none["sr_diff"]["ci"][0] >= 0
    assert versus_none["sr_ratio"]["value"] == pytest.approx(hybrid["sr"] / none["sr"])
    assert versus_none["no_call_rate_diff"]["value"] < 0
    ratio = versus_none["prompt_tokens_ratio"]
    assert ratio["value"] == pytest.approx(hybrid["prompt_tokens"] / none["prompt_tokens"])
    assert ratio["ci"][0] <= ratio["value"] <= ratio["ci"][1]
    served = versus_none["usage_prompt_tokens_ratio"]  # the loopback server's own counts
    assert served["value"] == pytest.approx(
        hybrid["usage_prompt_tokens"] / none["usage_prompt_tokens"]
    )
    assert ("hybrid/hard_weighted", "bm25/hard_weighted") in comps
    assert ("hybrid@0demos/hard_weighted", "none/no_icl") in comps
    goals = [g for g in report["targets"] if g["cell"] == "hybrid/hard_weighted"]
    assert {g["figure"] for g in goals} == {"sr_ratio", "prompt_tokens_ratio", "sr_diff"}


def test_plan_sums_by_hand() -> None:
    rows = [
        {"plan": 0, "step": 0, "kind": "tool", "correct": True, "n_calls": 1, "prompt_tokens": 10},
        {"plan": 0, "step": 1, "kind": "text", "correct": False, "n_calls": 0, "prompt_tokens": 20},
        {"plan": 2, "step": 0, "kind": "error", "correct": False, "prompt_tokens": 30},
    ]
    sums = plan_sums(rows, 3)
    assert sums["fsa"][0].tolist() == [1, 0, 0] and sums["fsa"][1].tolist() == [2, 0, 0]
    assert sums["sr"][0].tolist() == [0, 0, 0] and sums["sr"][1].tolist() == [1, 0, 0]
    assert sums["no_call_rate"][0].tolist() == [1, 0, 0]
    assert sums["prompt_tokens"][0].tolist() == [30, 0, 30]
    assert sums["prompt_tokens"][1].tolist() == [2, 0, 1]
    with pytest.raises(ValueError, match="outside the run's 2 test plans"):
        plan_sums(rows, 2)


def test_replay_reproduces_the_figures_and_names_a_missing_step(
    split: tuple[Dataset, Dataset], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steps = tmp_path / "run.steps.jsonl"
    live, replayed = tmp_path / "live.json", tmp_path / "replay.json"
    argv = [*BASE, "--retrievers", "none,bm25,hybrid", "--modes", "no_icl,hard_weighted"]
    argv += ["--model", "scripted", "--step-cache", str(steps)]
    with OpenAIChatServer(Scripted(split[1])) as server:
        assert cli.main([*argv, "--base-url", server.base_url, "--json", str(live)]) == 0
        n_requests = len(server.requests)
    out_live = capsys.readouterr().out
    assert cli.main([*argv, "--replay", "--json", str(replayed)]) == 0
    out_replay = capsys.readouterr().out
    a, b = json.loads(live.read_text()), json.loads(replayed.read_text())
    assert b["replay"] is True and b["base_url"] is None and b["calls"] == 0
    assert b["cached"] == n_requests
    for key in ("results", "comparisons", "targets"):
        assert a[key] == b[key]
    table = out_live.split("With 95% bootstrap")[1].split("FSA % / SR %")[0]
    assert table in out_replay
    # drop one answered step: the replay names it, and sends nothing
    lines = steps.read_text().splitlines()
    gone = json.loads(lines[3])
    steps.write_text("\n".join(lines[:3] + lines[4:]) + "\n")
    assert cli.main([*argv, "--replay"]) == 2
    err = capsys.readouterr().err
    where = f"{gone['retriever']}/{gone['mode']} plan {gone['plan']}"
    assert "error: replay: step " + where in err and f"step {gone['step']}" in err
    assert str(steps) in err and "(and 0 more)" in err
    # the library raises the same, and the options are checked
    with pytest.raises(StepNotCachedError, match="is not in the step cache"):
        run_e2e(plan_for(split, ["none"]), ReplayChat("scripted"), cache=StepCache(steps))
    assert cli.main([*argv, "--replay", "--base-url", "http://127.0.0.1:9/v1"]) == 2
    assert "--replay sends no request" in capsys.readouterr().err


def test_max_prompt_tokens_refuses_a_cell_with_its_sizes(tmp_path: Path) -> None:
    out = tmp_path / "dry.json"
    dry = [*BASE, "--retrievers", "none,hybrid", "--modes", "no_icl,hard_weighted"]
    assert cli.main([*dry, "--dry-run", "--no-step-cache", "--json", str(out)]) == 0
    sizes = {(r["retriever"], r["mode"]): r for r in json.loads(out.read_text())["results"]}
    limit = 2000  # above every hybrid prompt of this run, below every no_icl one (all 21 tools)
    argv = [*dry, "--dry-run", "--no-step-cache", "--max-prompt-tokens", str(limit)]
    assert cli.main([*argv, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [(r["retriever"], r["mode"]) for r in report["results"]] == [("hybrid", "hard_weighted")]
    (refused,) = report["skipped_cells"]
    assert refused["retriever"] == "none" and refused["mode"] == "no_icl"
    assert refused["n_over"] == refused["n_steps"] == sizes[("none", "no_icl")]["n_steps"]
    assert refused["mean_prompt_tokens"] == sizes[("none", "no_icl")]["prompt_tokens"]
    assert refused["limit"] == limit and refused["max_prompt_tokens"] > limit
    assert refused["max_prompt_tokens"] == sizes[("none", "no_icl")]["prompt_tokens_max"]
    assert sizes[("hybrid", "hard_weighted")]["prompt_tokens_max"] <= limit
    # nothing fits: a clear error
    assert cli.main([*argv[:-1], "10", "--json", str(out)]) == 2


def test_refused_baseline_is_reported_in_the_comparisons(
    split: tuple[Dataset, Dataset], capsys: pytest.CaptureFixture[str]
) -> None:
    train, test = split
    probe = plan_for(split, ["none", "hybrid"])
    hard = max(r.prompt_tokens for r in probe.requests if r.retriever == "hybrid")
    plan = prepare_e2e(
        train,
        test,
        ["none", "hybrid"],
        ["no_icl", "hard_weighted"],
        encoder=get_encoder("tfidf"),
        k=3,
        counter=get_token_counter("approx"),
        max_prompt_tokens=hard,
    )
    assert plan.cells == [("hybrid", "hard_weighted")]
    with OpenAIChatServer(Scripted(test)) as server:
        chat = OpenAIChat("scripted", base_url=server.base_url, retry=FAST)
        report = run_e2e(plan, chat, n_boot=100)
    (comp,) = report["comparisons"]
    assert comp["b"] == "none/no_icl" and "exceed --max-prompt-tokens" in comp["skipped"]
    # SR cannot be checked without the model's answers; the prompt tokens were counted
    sr, prompts = (g for g in report["targets"] if g["against"] == "none/no_icl")
    assert "skipped" in sr and "value" not in sr
    assert (
        "skipped" not in prompts and prompts["counted"] == "none/no_icl's prompts counted, not sent"
    )
    (sizes,) = plan.counted.values()
    assert len(sizes) == len([r for r in probe.requests if r.retriever == "none"])
    hybrid = next(r for r in report["results"] if r["retriever"] == "hybrid")
    expected = hybrid["intervals"]["prompt_tokens"]["value"] / (
        sum(t for _, t in sizes) / len(sizes)
    )
    ratio = comp["prompt_tokens_ratio"]
    assert ratio["value"] == pytest.approx(expected) and 0 < ratio["value"] < 1
    assert ratio["ci"][0] <= ratio["value"] <= ratio["ci"][1]
    assert prompts["value"] == ratio["value"] and prompts["met"] == (ratio["value"] <= 0.25)
    from dtdr_agents.evaluation.e2e import format_e2e_markdown

    text = format_e2e_markdown(report)
    assert "skipped none/no_icl (not run):" in text and "cannot be checked" in text
    assert "(B counted, not run)" in text and "(none/no_icl's prompts counted, not sent)" in text


@pytest.fixture
def scripted(split: tuple[Dataset, Dataset]) -> Scripted:
    return Scripted(split[1])


def test_server_dying_mid_run_keeps_every_answer_and_resumes(
    split: tuple[Dataset, Dataset], scripted: Scripted, tmp_path: Path
) -> None:
    plan = plan_for(split, ["none", "hybrid"])
    cache_path = tmp_path / "steps.jsonl"
    server = dying_server(scripted, answers=7)
    with server:
        chat = OpenAIChat("scripted", base_url=server.base_url, retry=FAST)
        with pytest.raises(EndpointUnreachableError) as caught:
            run_e2e(
                plan, chat, cache=StepCache(cache_path), concurrency=1, stop_on_unreachable=True
            )
        first = server.requests
    assert len(first) == 7
    message = str(caught.value)
    assert f"the endpoint {server.base_url} is unreachable" in message
    assert f"7 answered steps are in the step cache {cache_path}" in message
    cache = StepCache(cache_path)
    assert len(cache) == 7 and cache.skipped_lines == 0
    # the next run asks only what is missing: no request is sent twice
    with OpenAIChatServer(scripted) as again:
        chat = OpenAIChat("scripted", base_url=again.base_url, retry=FAST)
        report = run_e2e(plan, chat, cache=cache, concurrency=1)
        second = again.requests
    assert report["cached"] == 7 and report["calls"] == len(plan.requests) - 7
    assert len(second) == len(plan.requests) - 7
    sent = [json.dumps(b["messages"], sort_keys=True) + json.dumps(b["tools"]) for b in first]
    sent += [json.dumps(b["messages"], sort_keys=True) + json.dumps(b["tools"]) for b in second]
    assert len(set(sent)) == len(sent) == len(plan.requests)
    assert all(r["n_errors"] == 0 for r in report["results"])


def test_cli_stops_when_the_server_dies(
    split: tuple[Dataset, Dataset],
    scripted: Scripted,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    steps = tmp_path / "s.jsonl"
    server = dying_server(scripted, answers=4)
    with server:
        argv = [*BASE, "--retrievers", "none", "--model", "scripted", "--step-cache", str(steps)]
        code = cli.main(
            [*argv, "--base-url", server.base_url, "--max-retries", "1", "--concurrency", "1"]
        )
        answered = len(server.requests)
    assert code == 2
    err = capsys.readouterr().err
    assert "is unreachable" in err and "run the same command again to resume" in err
    assert len(StepCache(steps)) == answered == 4


def test_a_run_renders_as_a_generated_block_and_a_dry_run_is_refused(
    split: tuple[Dataset, Dataset], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """README's Table 3 is generated from the run's JSON (`<!-- results: e2e FILE -->`)."""
    argv = [*BASE, "--retrievers", "none,bm25", "--modes", "no_icl,hard_weighted"]
    argv += ["--model", "scripted+constrain-on"]
    with OpenAIChatServer(Scripted(split[1])) as server:
        live = [*argv, "--base-url", server.base_url, "--json", str(tmp_path / "e.json")]
        assert cli.main(live) == 0
    assert cli.main([*argv, "--dry-run", "--json", str(tmp_path / "dry.json")]) == 0
    doc = tmp_path / "doc.md"
    doc.write_text("# Table 3\n\n<!-- results: e2e e.json -->\nold\n<!-- /results -->\n")
    report = ["report", str(tmp_path), "--docs", str(doc)]
    assert cli.main([*report, "--write"]) == 0
    text = doc.read_text()
    run = json.loads((tmp_path / "e.json").read_text())
    fsa = cell(run, "bm25", "hard_weighted")["intervals"]["fsa"]
    assert "model `scripted+constrain-on`" in text
    assert f"| bm25 | hard_weighted | 28 | {100 * fsa['value']:.1f} [" in text
    assert "| bm25/hard_weighted | none/no_icl |" in text  # the paired comparison
    assert run["provenance"]["command"] in text
    capsys.readouterr()
    assert cli.main([*report, "--check"]) == 0
    doc.write_text(text.replace("e2e e.json", "e2e dry.json"))
    assert cli.main([*report, "--check"]) == 2
    assert "dry.json: field dry_run" in capsys.readouterr().err
