"""Prompt text of the mask modes (DTDR paper, Appendix G) and token counting."""

from __future__ import annotations

import ast
import json
import math
import os
import re

import pytest

from dtdr_agents.datasets.synthetic import DEMO_TOOLS
from dtdr_agents.foundation.errors import EncoderUnavailableError, UnknownToolError
from dtdr_agents.foundation.types import Tool, Toolset
from dtdr_agents.runtime import tokens
from dtdr_agents.runtime.prompting import (
    CHOOSE_ONE,
    FUNCTION_LIST_HEADER,
    MASK_MODES,
    WEIGHTED_LIST_HEADER,
    CharApproxCounter,
    binds_all_tools,
    build_tool_prompt,
    check_mode,
    count_tokens,
    format_history,
    get_token_counter,
    is_weighted,
    render_function_list,
    render_selection_prompt,
    soft_mask_guidelines,
    tool_schema_tokens,
    weighted_hard_note,
)

TOOLS = Toolset(DEMO_TOOLS)
PROBS = {"append_note_content": 0.7142857, "create_note": 0.2857143}


def test_modes() -> None:
    assert MASK_MODES == ("hard", "hard_weighted", "soft", "soft_weighted")
    assert [binds_all_tools(m) for m in MASK_MODES] == [False, False, True, True]
    assert [is_weighted(m) for m in MASK_MODES] == [False, True, False, True]
    with pytest.raises(ValueError, match="unknown mask mode 'weighted'"):
        check_mode("weighted")


def test_history_is_printed_like_the_paper() -> None:
    assert format_history(["create_note"]) == "('start', 'create_note')"
    assert format_history([]) == "('start',)"
    assert format_history(["a", "b"], key=("start", "a", "b")) == "('start', 'a', 'b')"


def test_function_list_is_the_appendix_g_literal() -> None:
    tools = [Tool("append_note_content", "Appends content to an existing note")]
    text = render_function_list(tools, PROBS)
    assert text == (
        "[{'function': 'append_note_content', 'description': "
        "'Appends content to an existing note', 'probability': 0.714}]"
    )
    assert ast.literal_eval(text)[0]["probability"] == 0.714
    assert "description" not in render_function_list(tools, descriptions=False)


def test_soft_mask_guidelines_follow_appendix_g2() -> None:
    text = soft_mask_guidelines(["append_note_content", "create_note"], ["create_note"])
    assert "here is a set of functions extracted from ground truth sequences" in text
    assert "latest function call history of \"('start', 'create_note')\"" in text
    assert "The list is below:\n['append_note_content', 'create_note']" in text
    assert text.endswith("Please use this to guide your decision-making on function selection.")
    weighted = soft_mask_guidelines(["append_note_content"], [], probabilities=PROBS)
    assert "'probability': 0.714" in weighted
    assert "percentage of times" in weighted


def test_weighted_hard_note_lists_probabilities() -> None:
    text = weighted_hard_note(["append_note_content", "create_note"], PROBS, ["create_note"])
    assert "percentage of times they appear in the ground truth sequences" in text
    listing = ast.literal_eval(text.splitlines()[-1])
    assert listing == [
        {"function": "append_note_content", "probability": 0.714},
        {"function": "create_note", "probability": 0.286},
    ]


@pytest.mark.parametrize("mode", MASK_MODES)
def test_build_tool_prompt(mode: str) -> None:
    counter = CharApproxCounter()
    preferred = ["summarize_pdf", "open_file"]
    p = build_tool_prompt(
        mode,  # type: ignore[arg-type]
        TOOLS,
        preferred,
        {"summarize_pdf": 0.6, "open_file": 0.3},
        history=["open_file"],
        counter=counter,
    )
    if mode.startswith("hard"):
        assert p.bound == ("open_file", "summarize_pdf")  # catalogue order, not rank order
    else:
        assert p.bound == TOOLS.names
    assert p.preferred == tuple(preferred)
    assert (p.text == "") == (mode == "hard")
    assert ("probability" in p.text) == mode.endswith("_weighted")
    if mode.startswith("soft"):
        assert "summarize_pdf" in p.text
    assert p.text_tokens == (math.ceil(len(p.text) / 4) if p.text else 0)
    expected_tools = sum(tool_schema_tokens(TOOLS.get(n), counter) for n in p.bound)  # type: ignore[arg-type]
    assert p.tool_tokens == expected_tools
    assert p.all_tool_tokens == sum(tool_schema_tokens(t, counter) for t in TOOLS)
    assert p.saved_tokens == p.all_tool_tokens - p.tool_tokens - p.text_tokens
    assert p.counter == "approx:chars/4"


def test_build_tool_prompt_rejects_unknown_names() -> None:
    with pytest.raises(UnknownToolError, match="teleport"):
        build_tool_prompt("hard", TOOLS, ["teleport"], counter=CharApproxCounter())


def test_render_selection_prompt() -> None:
    hard = render_selection_prompt(
        "Summarize a.pdf",
        ["open_file"],
        TOOLS,
        ["summarize_pdf"],
        {"summarize_pdf": 1.0},
        mode="hard_weighted",
    )
    assert hard.startswith(f"# Test Functions\n{WEIGHTED_LIST_HEADER}\n")
    assert CHOOSE_ONE in hard
    assert "'probability': 1.0" in hard
    assert "get_weather" not in hard
    assert hard.endswith("Executed plan so far:\nout_1 = open_file(...)")
    soft = render_selection_prompt("Hi there", [], TOOLS, ["web_search"], mode="soft")
    assert FUNCTION_LIST_HEADER in soft and "get_weather" in soft
    assert "# Soft Mask guidelines" in soft
    assert soft.endswith("Executed plan so far: None")


def test_auto_counter_reports_what_it_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DTDR_AGENTS_ALLOW_DOWNLOADS", raising=False)
    counter = get_token_counter()
    assert counter.name  # tiktoken if cached, else the MiniLM WordPiece tokenizer
    if counter.name.startswith("tiktoken:"):
        assert counter.exact
    else:
        assert not counter.exact
        assert counter.note.startswith("fallback: ")
        assert "tiktoken" in counter.note
    assert counter.count("hello world") >= 2
    assert count_tokens("") == 0


def test_wordpiece_counter_counts_subwords() -> None:
    wp = get_token_counter("wordpiece")
    assert wp.name == "wordpiece:all-MiniLM-L6-v2"
    assert wp.count("hello world") == 2
    text = json.dumps(DEMO_TOOLS[2].to_openai())
    assert wp.count(text) > len(text.split())  # JSON punctuation splits into tokens
    assert wp.count(" ".join(["word"] * 600)) == 600  # no 512-token truncation


def test_tiktoken_is_not_downloaded_unless_allowed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))  # an empty cache
    monkeypatch.delenv("DTDR_AGENTS_ALLOW_DOWNLOADS", raising=False)
    monkeypatch.setattr(tokens, "_COUNTERS", {})
    with pytest.raises(EncoderUnavailableError, match="not cached and downloads are off"):
        get_token_counter("tiktoken")
    auto = get_token_counter("auto")
    assert not auto.name.startswith("tiktoken")
    assert re.search(r"not cached", auto.note)


def test_without_tiktoken_cache_dir_tiktoken_is_not_tried_offline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    monkeypatch.delenv("DTDR_AGENTS_ALLOW_DOWNLOADS", raising=False)
    monkeypatch.setattr(tokens, "_COUNTERS", {})
    with pytest.raises(EncoderUnavailableError, match="TIKTOKEN_CACHE_DIR is unset"):
        get_token_counter("cl100k_base")
    auto = get_token_counter("auto")
    assert auto.name == "wordpiece:all-MiniLM-L6-v2"
    assert auto.note.startswith("fallback: ") and "TIKTOKEN_CACHE_DIR" in auto.note


def test_a_filled_tiktoken_cache_is_used_offline(
    monkeypatch: pytest.MonkeyPatch, tmp_path: os.PathLike[str]
) -> None:
    pytest.importorskip("tiktoken")
    import hashlib

    url = tokens.TIKTOKEN_ENCODINGS["o200k_base"]
    (tmp_path / hashlib.sha1(url.encode()).hexdigest()).write_bytes(b"x")  # type: ignore[operator]
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    assert tokens.tiktoken_offline_problem("o200k_base") is None
    assert "not cached" in (tokens.tiktoken_offline_problem("cl100k_base") or "")


def test_unknown_counter() -> None:
    with pytest.raises(ValueError, match="unknown token counter"):
        get_token_counter("gpt2-ish")
    assert get_token_counter("approx").count("abcdefgh") == 2
