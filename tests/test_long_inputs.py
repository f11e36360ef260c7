"""Long requests and long histories: the text DTDR-L always sees the latest calls (issue 11)."""

from __future__ import annotations

import numpy as np
import pytest

from dtdr_agents import DTDRL
from dtdr_agents.foundation.encoders import token_limit
from dtdr_agents.retrievers.linear import history_text, history_texts

LONG_REQUEST = " ".join(
    f"Please read report{i}.pdf carefully, note every figure about the budget of team {i}"
    for i in range(30)
)  # about 400 words: far beyond MiniLM's 254-token budget


class WordLimit:
    """A stand-in tokenizer: one token per whitespace-separated word."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens

    def token_counts(self, texts):
        return [len(t.split()) for t in texts]

    def truncate_tokens(self, text, n):
        return " ".join(text.split()[:n])


def test_short_texts_are_unchanged():
    limit = WordLimit(50)
    queries, histories = ["email Ana", "email Ana"], [(), ("get_email",)]
    assert history_texts(queries, histories, None, limit) == [
        history_text(q, h) for q, h in zip(queries, histories, strict=True)
    ]


def test_long_request_keeps_the_latest_calls_within_the_budget():
    limit = WordLimit(40)
    history = [f"tool{i}" for i in range(100)]
    (text,) = history_texts([LONG_REQUEST], [history], None, limit)
    assert len(text.split()) <= limit.max_tokens
    assert text.endswith("tool98 -> tool99")
    assert text.startswith("Please read report0.pdf")  # the request's start survives
    # the request keeps at least the part the history leaves
    (short,) = history_texts(["email Ana"], [history], None, limit)
    assert short.startswith("email Ana\nCalls so far: ") and short.endswith("tool99")


def test_minilm_token_budget_is_measured(encoder):
    limit = token_limit(encoder)
    assert limit is not None
    assert limit.max_tokens == 254  # max_seq_length 256 minus [CLS] and [SEP]
    (count,) = limit.token_counts([LONG_REQUEST])
    assert count > limit.max_tokens
    cut = limit.truncate_tokens(LONG_REQUEST, 10)
    assert LONG_REQUEST.startswith(cut) and limit.token_counts([cut]) == [10]


def _max_delta(model: DTDRL, query: str, a: list[str], b: list[str]) -> float:
    pa, pb = model.rank(query, a).probabilities, model.rank(query, b).probabilities
    return float(np.abs(pa - pb).max())


@pytest.mark.slow
def test_text_dtdr_l_sees_recent_calls_of_a_long_request(encoder, demo_data, demo_split):
    model = DTDRL(encoder=encoder, history="text", epochs=1).fit(
        demo_split[0][:25], demo_data.tools
    )
    names = demo_data.tools.names
    one, three = [names[0]], [names[0], names[1], names[2]]
    # before the fix: max |dp| was exactly 0.0 (the calls were truncated away)
    assert _max_delta(model, LONG_REQUEST, one, three) > 1e-6
    # a short request with 40+ calls: the last call still changes the ranking (exactly 0.0
    # before the fix)
    query = "Summarize budget.pdf and email the summary to Anna"
    long_a = [names[i % 5] for i in range(45)] + [names[0]]
    long_b = [names[i % 5] for i in range(45)] + [names[3]]
    assert _max_delta(model, query, long_a, long_b) > 1e-6
