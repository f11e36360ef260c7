"""The layer packages and the deprecated flat module paths of 0.1."""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest

from dtdr_agents import _compat


@pytest.mark.parametrize("old", sorted(_compat.MOVED))
def test_old_path_is_the_new_module_and_warns(old: str) -> None:
    new = _compat.MOVED[old]
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


def test_submodule_of_a_moved_package_follows_it() -> None:
    sys.modules.pop("dtdr_agents.e2e.harness", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        old = importlib.import_module("dtdr_agents.e2e.harness")
    assert old is importlib.import_module("dtdr_agents.evaluation.e2e.harness")


def test_unmoved_paths_are_not_aliased() -> None:
    assert _compat.new_name("dtdr_agents.retrievers.base") is None
    assert _compat.new_name("dtdr_agents.typesx") is None
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("dtdr_agents.no_such_module")


def test_protocol_names_load_from_the_evaluation_package() -> None:
    from dtdr_agents.evaluation import fit_and_evaluate
    from dtdr_agents.evaluation.protocol import fit_and_evaluate as direct

    assert fit_and_evaluate is direct
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        importlib.import_module("dtdr_agents.evaluation").nope  # noqa: B018
