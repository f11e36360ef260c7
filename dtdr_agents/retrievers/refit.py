"""Fit a retriever on a run store and publish it as a new version (`dtdr-agents refit`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dtdr_agents.retrievers.registry import make_retriever
from dtdr_agents.retrievers.saving import load_retriever
from dtdr_agents.store.publishing import DEFAULT_KEEP, Version, publish

if TYPE_CHECKING:
    from dtdr_agents.foundation.types import Toolset


def refit_and_publish(
    store: str,
    root: str | Path,
    tools: Toolset,
    *,
    retriever: str = "hybrid",
    keep: int = DEFAULT_KEEP,
    include_failures: bool = False,
    **params: Any,
) -> tuple[Version, int]:
    """Fit `retriever` on the store's runs and publish it behind ``root/latest``.

    The new version is checked by loading it before `latest` moves (`store.publish`), so a
    model that does not load is refused and the running version keeps serving.

    Args:
        store: The run store URL.
        root: The publish folder.
        tools: The catalogue the runs are checked against and the model ranks.
        retriever: The retriever id.
        keep: Versions kept.
        include_failures: Learn from runs whose outcome was a failure too.
        **params: Retriever parameters (e.g. ``encoder``).

    Returns:
        The published version and the number of runs it was fitted on.
    """
    from dtdr_agents.store.runs import RunStore  # SQLAlchemy: only when a refit runs

    with RunStore(store) as runs:
        data = runs.dataset(tools, exclude_failures=not include_failures)
    model = make_retriever(retriever, **params).fit(data.demos, data.tools)
    version = publish(
        root,
        model.save,
        check=load_retriever,
        keep=keep,
        note=f"{retriever} on {len(data.demos)} runs from {data.source}",
    )
    return version, len(data.demos)
