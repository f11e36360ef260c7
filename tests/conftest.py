"""Shared fixtures: the real MiniLM encoder (loaded once), embedded demo data, dataset paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SHARED_DATASETS = Path(__file__).resolve().parents[2] / "shared" / "datasets"


@pytest.fixture(scope="session")
def encoder():
    """The real all-MiniLM-L6-v2 encoder (offline), shared by the whole session."""
    from dtdr_agents.foundation.encoders import get_encoder

    enc = get_encoder("default")
    enc.encode(["warm up"])
    return enc


@pytest.fixture(scope="session")
def demo_data():
    """A small embedded demo dataset."""
    from dtdr_agents.datasets.synthetic import make_demo_dataset

    return make_demo_dataset(n=400, seed=3)


@pytest.fixture(scope="session")
def demo_split(demo_data):
    """(train, test) of the demo dataset."""
    demos = list(demo_data.demos)
    return demos[:300], demos[300:]


@pytest.fixture(scope="session")
def shared_datasets() -> Path:
    """The published datasets folder; skips when it is absent."""
    if not SHARED_DATASETS.is_dir():
        pytest.skip(f"published datasets not found at {SHARED_DATASETS}")
    return SHARED_DATASETS
