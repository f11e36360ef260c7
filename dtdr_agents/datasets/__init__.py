"""Dataset loaders for the published tool-calling benchmarks, a seeded split and statistics.

Every loader reads a dataset's *original* published format from a path and returns a
`Dataset` (tool catalogue + demonstrations + the problems it found). `load_dataset` picks the
loader by id:

=============  ==============================================================================
id             what ``path`` is
=============  ==============================================================================
``demo``       no path: a generated demo dataset (``n`` option, ``seed``)
``taskbench``  a TaskBench domain folder (``data_huggingface/``), or ``taskbench/`` with
               ``split="huggingface"``; ``catalogue_only=True`` for folders without data.json
``tinyagent``  ``training_data.json`` / ``testing_data.json`` or their folder
``sealtools``  the ``Seal-Tools_Dataset`` folder (``split="dev"``...) or a split file
``nestful``    the NESTFUL ``non-executable`` folder (``split="glaive"``/``"sgd"``) or a data
               file; ``tools_path`` is the spec file
``rectools``   the PTR ``Datasets`` folder or ``RecTools_QT.json``
``metatool``   the PTR folder, MetaTool's ``dataset`` folder, or the queries file
``toolret``    a ToolRet task folder (``queries.json`` + ``tools.json``) or its queries file
``jsonl``      a JSON-lines demonstrations file; ``tools_path`` the tools file
=============  ==============================================================================

Common behaviour (the ``**options`` every loader takes, typed as `LoadOptions`):
``skip_bad=False`` raises `DatasetFormatError` (file and line) at the first
malformed record, ``skip_bad=True`` skips it and records a `Problem`; published quirks
(unknown tools, odd links, duplicates) are never fatal and always recorded as problems;
``limit`` keeps the first n demonstrations; exact duplicate samples are skipped unless
``keep_duplicates=True``. Problem messages start with ``skipped:``, ``repaired:`` or ``kept:``.
Each loader declares its published record format as pydantic models (in its module); a
malformed record's message names the file, the line (or the record's place, ``nodes[3]``)
and the field (``calling[0].api``).

Splits: `split_demonstrations` / `split_dataset` (seeded, each tool's calls about 70/30, as in
DTDR), or `load_train_test`, which also takes a published split (``train_split="dev",
test_split="test_in_domain"`` for Seal-Tools).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from dtdr_agents.datasets._io import DatasetNotFoundError, LoadOptions, UnknownTools
from dtdr_agents.datasets.base import Dataset, Problem
from dtdr_agents.datasets.jsonl import load_jsonl, load_tools
from dtdr_agents.datasets.nestful import load_nestful
from dtdr_agents.datasets.plans import OrderedPlan, PlanCycleError, order_plan
from dtdr_agents.datasets.ptr import load_metatool, load_ptr, load_rectools
from dtdr_agents.datasets.sealtools import PlanOrder, load_sealtools
from dtdr_agents.datasets.split import split_dataset, split_demonstrations
from dtdr_agents.datasets.stats import dataset_stats, format_stats
from dtdr_agents.datasets.taskbench import load_taskbench, load_taskbench_catalogue
from dtdr_agents.datasets.tinyagent import load_tinyagent
from dtdr_agents.datasets.toolret import ToolRetDataset, load_toolret

DATASET_IDS = (
    "demo",
    "taskbench",
    "tinyagent",
    "sealtools",
    "nestful",
    "rectools",
    "metatool",
    "toolret",
    "jsonl",
)
"""The ids `load_dataset` accepts (``-`` and ``_`` are ignored: ``"seal-tools"`` works)."""

_PATH_HINTS = {
    "taskbench": "a TaskBench domain folder such as taskbench/data_huggingface/ (or "
    "taskbench/ with split='huggingface')",
    "tinyagent": "TinyAgent's training_data.json / testing_data.json or their folder",
    "sealtools": "the Seal-Tools_Dataset folder (tool.jsonl, dev.jsonl, ...) or a split file",
    "nestful": "NESTFUL's data/non-executable folder or a *-data.json file",
    "rectools": "PTR's src/Datasets folder or RecTools_QT.json",
    "metatool": "PTR's src/Datasets folder, MetaTool's dataset folder, or the queries file",
    "toolret": "a ToolRet task folder (queries.json + tools.json) or its queries.json",
    "jsonl": "a JSON-lines file of demonstrations",
}


def _normalise_id(dataset_id: str) -> str:
    key = str(dataset_id).lower().replace("-", "").replace("_", "")
    for known in DATASET_IDS:
        if key == known:
            return known
    raise ValueError(f"unknown dataset id {dataset_id!r}; known ids: {', '.join(DATASET_IDS)}")


def _call(loader: Callable[..., Dataset], dataset_id: str, **kwargs: Any) -> Dataset:
    """Call `loader`, rejecting options it does not take with a clear message."""
    params = inspect.signature(loader).parameters.values()
    accepted = {p.name for p in params if p.kind is not p.VAR_KEYWORD}
    if any(p.kind is p.VAR_KEYWORD for p in params):
        accepted |= set(LoadOptions.__annotations__)  # the common **options
    unknown = sorted(k for k in kwargs if k not in accepted)
    if unknown:
        allowed = sorted(k for k in accepted if k != "path")
        raise TypeError(
            f"load_dataset({dataset_id!r}) does not take {', '.join(unknown)}; "
            f"it takes {', '.join(allowed)}"
        )
    return loader(**kwargs)


def load_dataset(
    dataset_id: str,
    path: str | Path | None = None,
    *,
    tools_path: str | Path | None = None,
    split: str | None = None,
    skip_bad: bool = False,
    limit: int | None = None,
    seed: int = 0,
    **options: Any,
) -> Dataset:
    """Load a dataset by id from its published files.

    Args:
        dataset_id: One of `DATASET_IDS`.
        path: Where the dataset is (see the table in this module's docstring); not used by
            ``"demo"``.
        tools_path: A tools / spec file, for the loaders that take one (``jsonl``,
            ``sealtools``, ``nestful``, ``rectools``, ``metatool``, ``tinyagent``).
        split: A part of the dataset: TaskBench domain, Seal-Tools split file, NESTFUL source,
            TinyAgent ``"train"``/``"test"``.
        skip_bad: Skip malformed records (recording problems) instead of raising.
        limit: Keep at most this many demonstrations.
        seed: Seed of the generated ``"demo"`` dataset (the real datasets are read as is).
        **options: Loader-specific options, e.g. ``unknown_tools``, ``keep_duplicates``,
            ``order`` (``sealtools``/``nestful``), ``catalogue_only`` (``taskbench``),
            ``n`` (``demo``).

    Returns:
        The dataset.

    Raises:
        ValueError: Unknown id, or a missing path.
        TypeError: An option the chosen loader does not take.
        DatasetNotFoundError: A file or folder is missing.
        DatasetFormatError: A malformed record (with ``skip_bad=False``).
    """
    key = _normalise_id(dataset_id)
    given = {"tools_path": tools_path, "split": split}
    if key == "demo":
        bad = [k for k, v in given.items() if v is not None] + (["path"] if path else [])
        if bad:
            raise ValueError(f"the demo dataset is generated; it takes no {', '.join(bad)}")
        n = options.pop("n", 2400)
        if options:
            raise TypeError(f"load_dataset('demo') does not take {', '.join(sorted(options))}")
        from dtdr_agents.datasets.synthetic import make_demo_dataset

        ds = make_demo_dataset(n=n, seed=seed)
        return replace(ds, demos=tuple(ds.demos[:limit])) if limit is not None else ds
    if path is None:
        raise ValueError(f"load_dataset({key!r}) needs a path: {_PATH_HINTS[key]}")
    common: dict[str, Any] = {"path": path, "skip_bad": skip_bad, **options}
    if key == "taskbench":
        if tools_path is not None:
            raise ValueError("TaskBench reads tool_desc.json from its folder; tools_path is unused")
        if common.pop("catalogue_only", False):
            return _call(load_taskbench_catalogue, key, split=split, **common)
        return _call(load_taskbench, key, split=split, limit=limit, **common)
    if key in ("rectools", "metatool", "toolret", "jsonl") and split is not None:
        raise ValueError(f"load_dataset({key!r}) has no splits; give the file as path")
    if key == "tinyagent":
        return _call(load_tinyagent, key, split=split, tools_path=tools_path, limit=limit, **common)
    if key == "sealtools":
        return _call(load_sealtools, key, split=split, tools_path=tools_path, limit=limit, **common)
    if key == "nestful":
        return _call(load_nestful, key, split=split, spec_path=tools_path, limit=limit, **common)
    if key == "rectools":
        return _call(load_rectools, key, tools_path=tools_path, limit=limit, **common)
    if key == "metatool":
        return _call(load_metatool, key, tools_path=tools_path, limit=limit, **common)
    if key == "toolret":
        return _call(load_toolret, key, tools_path=tools_path, limit=limit, **common)
    return _call(load_jsonl, key, tools_path=tools_path, limit=limit, **common)


def load_train_test(
    dataset_id: str,
    path: str | Path | None = None,
    *,
    test_size: float = 0.3,
    seed: int = 0,
    train_split: str | None = None,
    test_split: str | None = None,
    **kwargs: Any,
) -> tuple[Dataset, Dataset]:
    """Load a dataset as ``(train, test)``: a published split, or DTDR's seeded 70/30 split.

    With both `train_split` and `test_split` (e.g. Seal-Tools ``"dev"`` and
    ``"test_in_domain"``), each is loaded with `load_dataset` and they must share the tool
    catalogue. Otherwise the whole dataset is loaded and split by `split_dataset` (each
    tool's calls about ``1 - test_size`` / ``test_size``), which is DTDR's protocol.

    Args:
        dataset_id: One of `DATASET_IDS`.
        path: As in `load_dataset`.
        test_size: Test fraction for the seeded split.
        seed: Seed of the split (and of the ``"demo"`` data).
        train_split: Published split to use as train (with `test_split`).
        test_split: Published split to use as test (with `train_split`).
        **kwargs: Passed to `load_dataset`.

    Returns:
        ``(train, test)`` datasets sharing one catalogue.

    Raises:
        ValueError: Only one of the two splits given, or the splits' catalogues differ.
    """
    if (train_split is None) != (test_split is None):
        raise ValueError("give both train_split and test_split, or neither")
    if train_split is not None and test_split is not None:
        train = load_dataset(dataset_id, path, split=train_split, seed=seed, **kwargs)
        test = load_dataset(dataset_id, path, split=test_split, seed=seed, **kwargs)
        if train.tools != test.tools:
            raise ValueError(
                f"splits {train_split!r} and {test_split!r} have different tool catalogues"
            )
        return train, test
    ds = load_dataset(dataset_id, path, seed=seed, **kwargs)
    return split_dataset(ds, test_size=test_size, seed=seed)


__all__ = [
    "DATASET_IDS",
    "Dataset",
    "DatasetNotFoundError",
    "LoadOptions",
    "OrderedPlan",
    "PlanCycleError",
    "PlanOrder",
    "Problem",
    "ToolRetDataset",
    "UnknownTools",
    "dataset_stats",
    "format_stats",
    "load_dataset",
    "load_jsonl",
    "load_metatool",
    "load_nestful",
    "load_ptr",
    "load_rectools",
    "load_sealtools",
    "load_taskbench",
    "load_taskbench_catalogue",
    "load_tinyagent",
    "load_toolret",
    "load_tools",
    "load_train_test",
    "order_plan",
    "split_dataset",
    "split_demonstrations",
]
