"""The base class of retrievers that wrap another: ToolQP (`toolqp:<base>`), PTR (`ptr:<base>`).

A composite takes a `base` retriever as a constructor parameter, fits it in `fit` (in place,
as a scikit-learn `Pipeline` fits its steps; a composite given no base builds its class's
`default_base`), keeps it in sync with catalogue changes, and is saved with the base in the
sub-folder `base/`. Its `_score` usually starts from `self.base_.rank(...)` and returns
probabilities over the current catalogue (`Scores(..., over_current=True)`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Self

from dtdr_agents.foundation.errors import NotFittedError
from dtdr_agents.foundation.types import Demonstration, Toolset
from dtdr_agents.retrievers.base import ToolRetriever
from dtdr_agents.retrievers.registry import make_retriever


class CompositeRetriever(ToolRetriever):
    """A retriever over a base retriever (subclasses set `retriever_id` and `_score`).

    Attributes:
        base: The base retriever given to the constructor (None: `default_base`).
        base_: The fitted base retriever (after `fit` or `load`).
    """

    composite: ClassVar[bool] = True
    default_base: ClassVar[str] = "qts"
    uses_encoder: ClassVar[bool] = False  # the base's encoder serves

    base: ToolRetriever | None

    def fit(
        self,
        demos: Iterable[Demonstration],
        tools: Toolset | Iterable[Any],
        *,
        progress: bool = False,
    ) -> Self:
        """Fit the base retriever, then this one; returns self (`progress`: see the base)."""
        self._check_params()  # before the (possibly slow) base fit
        demo_list = list(demos)
        toolset = tools if isinstance(tools, Toolset) else Toolset(tools)
        base = self.base if self.base is not None else make_retriever(self.default_base)
        if not isinstance(base, ToolRetriever):
            raise TypeError(f"base must be a ToolRetriever, got {type(base).__name__}")
        base.fit(demo_list, toolset, progress=progress)
        self.base_ = base
        super().fit(demo_list, toolset, progress=progress)
        return self

    def _after_base_fit(self) -> None:
        self.encoder_ = self.base_.encoder_

    def _fit(self, demos: list[Demonstration], tools: Toolset) -> None:
        self._after_base_fit()
        self._fit_composite(demos, tools)

    def _fit_composite(self, demos: list[Demonstration], tools: Toolset) -> None:
        """Learn the composite's own attributes (the base is fitted already)."""

    def fitted_base(self) -> ToolRetriever:
        """The fitted base retriever.

        Raises:
            NotFittedError: Before `fit` or `load`.
        """
        base: ToolRetriever | None = getattr(self, "base_", None)
        if base is None:
            raise NotFittedError(
                f"{type(self).__name__} is not fitted: call fit(demos, tools) or load a saved model"
            )
        return base

    def parts(self) -> dict[str, ToolRetriever]:
        """The fitted base once fitted, else the `base` parameter (if any)."""
        base = getattr(self, "base_", None) or self.base
        return {"base": base} if base is not None else {}

    def _set_parts(self, parts: Mapping[str, ToolRetriever]) -> None:
        self.base_ = parts["base"]
        self._after_base_fit()

    def set_tools(self, tools: Toolset | Iterable[Any]) -> Self:
        """Change the catalogue of this retriever and of its base."""
        toolset = tools if isinstance(tools, Toolset) else Toolset(tools)
        self.fitted_base().set_tools(toolset)
        return super().set_tools(toolset)
