"""Registration order is the order `dtdr-agents bench` runs its default retrievers in.

The baselines live in one module each; `dtdr_agents.retrievers.baselines` imports them in this
order, and no module a baseline imports may register another baseline first.
"""

from __future__ import annotations

from dtdr_agents.retrievers import registry


def test_default_bench_order_is_stable() -> None:
    assert registry.default_bench_ids() == (
        "random",
        "bm25",
        "qts",
        "tgr",
        "lim",
        "dtdr-c",
        "dr",
        "dtdr-l",
        "dtdr-l-s",
        "lr",
        "hybrid",
    )


def test_every_id_registers_in_the_same_order() -> None:
    assert registry.retriever_ids() == sorted(registry._BY_ID)
    assert list(registry._BY_ID)[:5] == ["random", "bm25", "qts", "tgr", "lim"]
