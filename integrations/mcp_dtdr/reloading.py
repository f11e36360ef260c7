"""Serve a published model folder (``DIR`` or ``DIR/latest``): new versions between steps.

`published_models` returns a `dtdr_agents.store.Reloader` whose loader retargets each new
version to the upstream's current tools (as the proxy does with the model it starts on), so
that a version fitted on an older catalogue still serves. The proxy's step selector takes up
a new version at the start of a step (`StepSelector` with a `Reloader`), never inside one; a
version that does not load (corrupt, or of an incompatible format) is refused with a
`ReloadWarning` and the running version keeps serving. The proxy calls `Reloader.reload`
from a background task every ``reload_interval`` seconds, so that loading a new version
never delays a step.
"""

from __future__ import annotations

import threading
from pathlib import Path

from dtdr_agents.foundation.types import Toolset
from dtdr_agents.retrievers import load_retriever
from dtdr_agents.retrievers.base import ToolRetriever
from dtdr_agents.runtime import fitted_tools
from dtdr_agents.store.publishing import MARKER, POINTER, Reloader

__all__ = ["RetargetingLoad", "publish_root", "published_models"]


class RetargetingLoad:
    """Loads a published version and retargets it to the upstream's current tools.

    Attributes:
        toolset: The upstream's tools (None until the proxy knows them: no retargeting).
    """

    def __init__(self) -> None:
        self.toolset: Toolset | None = None
        self._lock = threading.Lock()

    def __call__(self, folder: Path) -> ToolRetriever:
        """The retriever saved in `folder`, ranking the upstream's tools."""
        model = load_retriever(folder)
        with self._lock:
            toolset = self.toolset
        if toolset is not None and set(fitted_tools(model).names) != set(toolset.names):
            model.set_tools(toolset)  # tools added after fit are ranked by a prior
        return model

    def set_toolset(self, toolset: Toolset) -> None:
        """Retarget the versions loaded from now on to `toolset`."""
        with self._lock:
            self.toolset = toolset


def publish_root(path: str | Path) -> Path | None:
    """The publish folder `path` names (``DIR`` or ``DIR/latest``), or None for a model folder."""
    folder = Path(path)
    if (folder / MARKER).is_file():
        return folder
    if folder.name == POINTER and (folder.parent / MARKER).is_file():
        return folder.parent
    return None


def published_models(root: str | Path) -> Reloader[ToolRetriever]:
    """A `Reloader` of the versions published in `root` that only reloads when asked.

    Raises:
        PublishError: Nothing is published in `root`, or its current version does not load.
    """
    return Reloader(root, RetargetingLoad(), poll_interval=None)
