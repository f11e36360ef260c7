"""Issue 41: an end-to-end replay rebuilds the figures from the prompts the step cache recorded.

A prompt shows the retrieved tools' probabilities to 3 decimals; on another machine (another
BLAS kernel or thread count) a retriever may give one that differs in its third decimal, or
another tool at the k-th place. The step cache records each step's bound tools and mode text,
so `--replay` answers every step with the prompt that was answered, `--check-prompts` counts
the steps whose prompt this commit builds differently, and `--record-prompts` fills in rows
written before prompts were recorded. "Another machine" is played here by perturbing the
retrieval: probabilities 0.3% higher and, at every other step, one retrieved tool fewer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openai_server import OpenAIChatServer, clear_proxies
from test_e2e_table3 import BASE, Scripted, plan_for

from dtdr_agents import cli
from dtdr_agents.datasets import load_train_test
from dtdr_agents.datasets.base import Dataset
from dtdr_agents.evaluation.e2e import StepCache
from dtdr_agents.evaluation.e2e.cache import step_key
from dtdr_agents.evaluation.e2e.harness import check_prompts, match_recorded
from dtdr_agents.evaluation.e2e.protocol import RECORDED_FIELDS, E2EStep, ProtocolBuilder
from dtdr_agents.retrievers.base import ToolRetriever

FIGURES = ("results", "comparisons", "targets")


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_proxies(monkeypatch)


@pytest.fixture(scope="module")
def split() -> tuple[Dataset, Dataset]:
    return load_train_test("demo", None, seed=0, limit=40)


@pytest.fixture(scope="module")
def recorded(
    split: tuple[Dataset, Dataset], tmp_path_factory: pytest.TempPathFactory
) -> tuple[list[str], Path, dict[str, Any]]:
    """A live run against the scripted server: its arguments, step cache and report."""
    folder = tmp_path_factory.mktemp("recorded")
    steps, live = folder / "run.steps.jsonl", folder / "live.json"
    argv = [*BASE, "--retrievers", "none,bm25", "--modes", "no_icl,hard_weighted,soft_weighted"]
    argv += ["--k", "3", "--model", "scripted", "--step-cache", str(steps)]
    with OpenAIChatServer(Scripted(split[1])) as server:
        assert cli.main([*argv, "--base-url", server.base_url, "--json", str(live)]) == 0
    return argv, steps, json.loads(live.read_text())


def _another_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retrievals as another machine might give them: see the module docstring."""
    original = ProtocolBuilder.retrieve

    def retrieve(
        self: ProtocolBuilder, retriever: ToolRetriever, step: E2EStep
    ) -> tuple[tuple[str, ...], dict[str, float]]:
        names, probabilities = original(self, retriever, step)
        if step.step % 2 and len(names) > 1:
            names = names[:-1]
        return names, {n: probabilities[n] * 1.003 for n in names}

    monkeypatch.setattr(ProtocolBuilder, "retrieve", retrieve)


def _copy(steps: Path, tmp_path: Path, *, strip: bool = False) -> Path:
    """A copy of the step cache; `strip` drops the recorded prompts, as older rows were."""
    out = tmp_path / "copy.steps.jsonl"
    rows = [json.loads(line) for line in steps.read_text().splitlines()]
    if strip:
        rows = [{k: v for k, v in r.items() if k not in RECORDED_FIELDS} for r in rows]
    out.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    return out


def _with_cache(argv: list[str], steps: Path) -> list[str]:
    i = argv.index("--step-cache")
    return [*argv[: i + 1], str(steps), *argv[i + 2 :]]


def test_every_answered_step_records_its_prompt(
    recorded: tuple[list[str], Path, dict[str, Any]], split: tuple[Dataset, Dataset]
) -> None:
    _, steps, _ = recorded
    plan = plan_for(split, ["none", "bm25"])
    cache = StepCache(steps)
    rows = list(cache.rows())
    assert rows and all(set(RECORDED_FIELDS) <= set(r) for r in rows)
    weighted = [r for r in rows if r["mode"] == "hard_weighted"]
    assert all(r["bound"][-1] == "end_plan" and r["n_bound"] == len(r["bound"]) for r in rows)
    assert all("0." in r["prompt_text"] and r["preferred"] for r in weighted)
    assert all(r["prompt_text"] == "" for r in rows if r["mode"] == "no_icl")
    # each record rebuilds the very prompt its key hashes (k=3 here, as in plan_for)
    for m in match_recorded(plan, cache, "scripted"):
        assert m.status == "same"
        row = cache.get(step_key("scripted", m.head.retriever, m.head.mode, m.head.fingerprint))
        assert row is not None
        rebuilt = plan.builder.recorded_request(m.head, row)
        assert rebuilt is not None and rebuilt.fingerprint == m.head.fingerprint


def test_replay_on_another_machine_uses_the_recorded_prompts(
    recorded: tuple[list[str], Path, dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv, steps, live = recorded
    argv = _with_cache(argv, _copy(steps, tmp_path))
    here = tmp_path / "here.json"
    assert cli.main([*argv, "--replay", "--json", str(here)]) == 0
    assert json.loads(here.read_text())["replayed_changed_prompts"] == 0
    assert cli.main([*argv, "--check-prompts"]) == 0
    assert "0 of " in capsys.readouterr().out

    _another_machine(monkeypatch)
    there = tmp_path / "there.json"
    assert cli.main([*argv, "--replay", "--json", str(there)]) == 0
    report = json.loads(there.read_text())
    for key in FIGURES:
        assert report[key] == live[key]
    assert report["calls"] == 0 and report["replayed_changed_prompts"] > 10
    assert "--check-prompts lists them" in capsys.readouterr().err

    # the check counts them, per cell, and says what differs; it exits 1
    assert cli.main([*argv, "--check-prompts"]) == 1
    out = capsys.readouterr().out
    changed = report["replayed_changed_prompts"]
    assert f"{changed} of {report['cached']} steps' prompts would change" in out
    assert "| none | no_icl |" in out and "0 have no recorded answer" in out
    assert "bm25/hard_weighted plan 0 step 0: changed" in out and "probability" in out


def test_check_prompts_counts_by_cell_and_a_tampered_record_is_not_used(
    recorded: tuple[list[str], Path, dict[str, Any]],
    split: tuple[Dataset, Dataset],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, steps, _ = recorded
    copy = _copy(steps, tmp_path)
    _another_machine(monkeypatch)
    plan = plan_for(split, ["none", "bm25"])
    check = check_prompts(plan, StepCache(copy), "scripted")
    cells = {(c["retriever"], c["mode"]): c for c in check["cells"]}
    assert cells[("none", "no_icl")]["changed"] == 0  # every tool bound: no retrieval shown
    assert check["changed"] == sum(c["changed"] for c in check["cells"]) > 0
    assert check["missing"] == 0 and check["same"] + check["changed"] == check["n_steps"]
    assert check["examples"] and check["examples"][0]["status"] == "changed"
    # a record edited after the answer no longer rebuilds its key: that step has no answer
    first = check["examples"][0]
    rows = [json.loads(line) for line in copy.read_text().splitlines()]
    ident = ("retriever", "mode", "plan", "step")
    edited = next(r for r in rows if all(r[k] == first[k] for k in ident))
    edited["prompt_text"] = edited["prompt_text"].replace("0.", "0.9", 1)
    copy.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    again = check_prompts(plan, StepCache(copy), "scripted")
    assert again["missing"] == 1 and again["changed"] == check["changed"] - 1


def test_the_last_recorded_answer_of_a_step_wins(
    recorded: tuple[list[str], Path, dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    argv, steps, live = recorded
    argv = _with_cache(argv, _copy(steps, tmp_path))
    second = tmp_path / "second.json"
    with monkeypatch.context() as patched:  # another machine asks its changed prompts again
        _another_machine(patched)
        with OpenAIChatServer(lambda body: {"content": "I would rather not."}) as server:
            assert cli.main([*argv, "--base-url", server.base_url, "--json", str(second)]) == 0
            asked = len(server.requests)
    report = json.loads(second.read_text())
    assert asked == report["calls"] > 10 and report["results"] != live["results"]
    # back here, where the first run's prompts are built again: the replay gives the report
    # the last run wrote, from its answers, and the check says which steps moved
    replayed = tmp_path / "replayed.json"
    assert cli.main([*argv, "--replay", "--json", str(replayed)]) == 0
    again = json.loads(replayed.read_text())
    assert again["replayed_changed_prompts"] == asked
    for key in FIGURES:
        assert again[key] == report[key]


def test_older_rows_replay_by_key_and_record_prompts_upgrades_them(
    recorded: tuple[list[str], Path, dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv, steps, live = recorded
    old = _copy(steps, tmp_path, strip=True)
    argv = _with_cache(argv, old)
    before = old.read_bytes()
    # rows without a recorded prompt still replay here, matched by key
    here = tmp_path / "here.json"
    assert cli.main([*argv, "--replay", "--json", str(here)]) == 0
    assert all(json.loads(here.read_text())[k] == live[k] for k in FIGURES)
    # fill them in: every selection row gains its prompt, nothing else changes
    assert cli.main([*argv, "--record-prompts"]) == 0
    assert "recorded the prompt of" in capsys.readouterr().out
    after = [json.loads(line) for line in old.read_text().splitlines()]
    original = [json.loads(line) for line in steps.read_text().splitlines()]
    assert after == original  # the fields a live run records now, and nothing else
    assert cli.main([*argv, "--record-prompts"]) == 0
    assert "of 0 older row(s)" in capsys.readouterr().out  # nothing left to fill: unchanged
    assert old.read_bytes() != before
    # now another machine's retrievals replay too
    _another_machine(monkeypatch)
    there = tmp_path / "there.json"
    assert cli.main([*argv, "--replay", "--json", str(there)]) == 0
    assert all(json.loads(there.read_text())[k] == live[k] for k in FIGURES)


def test_older_rows_on_another_machine_are_named_missing(
    recorded: tuple[list[str], Path, dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv, steps, _ = recorded
    argv = _with_cache(argv, _copy(steps, tmp_path, strip=True))
    _another_machine(monkeypatch)
    assert cli.main([*argv, "--check-prompts"]) == 1
    out = capsys.readouterr().out
    assert "0 of " in out and "missing" in out
    assert cli.main([*argv, "--replay"]) == 2
    assert "error: replay: step bm25/" in capsys.readouterr().err


def test_cache_only_options_are_checked(
    recorded: tuple[list[str], Path, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    argv, _, _ = recorded
    for extra in (["--replay"], ["--dry-run"], ["--record-prompts"], ["--no-step-cache"]):
        assert cli.main([*argv, "--check-prompts", *extra]) == 2
        assert "--check-prompts" in capsys.readouterr().err
    no_model = [a for a in argv if a not in ("--model", "scripted")]
    assert cli.main([*no_model, "--record-prompts"]) == 2
    assert "needs --model" in capsys.readouterr().err
