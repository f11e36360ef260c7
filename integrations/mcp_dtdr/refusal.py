"""A model that fails to rank is refused: the client is told why once, then briefly.

A retriever raises a typed error of ours (`dtdr_agents.foundation.errors.RankingError` and the
other `DTDRError` subclasses) when it cannot rank, for example when a learned array of a
corrupt model gives probabilities that are not finite. The proxy cannot serve such a model:
every step would fail again. `ModelRefusal` records the first failure, writes one line to the
proxy's stderr (a traceback too, once, only for an error that is not one of ours: a bug), and
answers the request that failed with an MCP error naming the model and the reason. From then
on every request gets a short MCP error naming the model, and no ranking runs. Served from a
publish folder, the refusal holds for the version that failed; a newly published version
taken up between steps (``--reload-interval``) serves again.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError

from dtdr_agents.foundation.errors import DTDRError
from dtdr_agents.store.publishing import Reloader
from mcp_dtdr.upstream import _mcp_error

T = TypeVar("T")

PREFIX = "dtdr-agents mcp-proxy"


class ModelRefusal:
    """Refuses the model once it failed to rank, telling the client why once.

    Args:
        model: The model's name in messages (its folder, or the zero-shot default).
        reloader: The `Reloader` of a publish folder, or None.

    Attributes:
        reason: Why the model is refused (``"ErrorType: message"``), None while it serves.
        version: The published version refused (None for a model folder).
        told: Whether a client was given the full reason.
    """

    def __init__(self, model: str, reloader: Reloader[Any] | None = None) -> None:
        self.model = model
        self.reloader = reloader
        self.reason: str | None = None
        self.version: str | None = None
        self.told = False

    def _served(self) -> str:
        if self.reloader is None:
            return self.model
        return f"{self.model} (version {self.reloader.version.name})"

    def check(self) -> None:
        """Raise the refusal's MCP error when the model is refused (the full reason once).

        Raises:
            MCPError: The model is refused.
        """
        error = self.error()
        if error is not None:
            raise error

    def error(self) -> MCPError | None:
        """The MCP error of a request while the model is refused (the full reason once)."""
        if self.reason is None:
            return None
        if self.reloader is not None and self.reloader.version.name != self.version:
            _say(f"serving {self._served()}: it replaced the refused version {self.version}")
            self.reason = self.version = None
            self.told = False
            return None
        if not self.told:
            self.told = True
            return _mcp_error(
                f"{PREFIX}: the model {self._served()} failed to rank and is refused: "
                f"{self.reason}. No tools are offered until the proxy serves a working model "
                "(repair or refit it and restart the proxy, or publish a new version)",
                types.INTERNAL_ERROR,
            )
        return _mcp_error(
            f"{PREFIX}: the model {self._served()} is refused (it failed to rank; the reason "
            "was given once and is on the proxy's stderr)",
            types.INTERNAL_ERROR,
        )

    def refuse(self, exc: Exception) -> None:
        """Record that the model failed to rank with `exc` (the first failure is kept)."""
        if self.reason is not None:
            return
        self.reason = f"{type(exc).__name__}: {exc}"
        self.version = None if self.reloader is None else self.reloader.version.name
        _say(f"the model {self._served()} failed to rank and is refused: {self.reason}")
        if not isinstance(exc, DTDRError):  # not one of our errors: a bug, shown once
            traceback.print_exception(exc, file=sys.stderr)

    async def rank(self, work: Callable[..., T], *args: Any) -> T:
        """`work(*args)` (a ranking) in a worker thread; a failure refuses the model.

        Raises:
            MCPError: The model is refused (now or before), or `work` raised one (a client's
                bad input), which passes unchanged.
        """
        self.check()
        try:
            return await anyio.to_thread.run_sync(work, *args)
        except MCPError:
            raise
        except Exception as exc:
            self.refuse(exc)
            reason = self.reason
            error = self.error() or _mcp_error(f"{PREFIX}: the model failed to rank: {reason}")
            raise error from None

    async def rank_after_call(self, work: Callable[..., object], *args: Any) -> None:
        """`rank`, for the ranking after a forwarded call: a failure refuses the model silently.

        The call went through, so its answer is returned; the next request is told why.
        """
        if self.reason is not None:
            return
        try:
            await anyio.to_thread.run_sync(work, *args)
        except MCPError:
            raise
        except Exception as exc:
            self.refuse(exc)


def _say(text: str) -> None:
    """One line to stderr (the client's channel is stdout on stdio)."""
    print(f"{PREFIX}: {text}", file=sys.stderr, flush=True)
