"""The retriever registry, composite ids, nested persistence and the import graph."""

from __future__ import annotations

import ast
import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

import dtdr_agents
from dtdr_agents.foundation.errors import ModelLoadError
from dtdr_agents.foundation.types import Tool, Toolset
from dtdr_agents.retrievers import (
    DTDRC,
    DTDRL,
    CompositeRetriever,
    QTSRetriever,
    Scores,
    ToolRetriever,
    composite_ids,
    default_bench_ids,
    load_retriever,
    make_retriever,
    registry,
    retriever_ids,
)


@pytest.fixture
def scratch_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Classes defined in a test register into a copy that is dropped afterwards."""
    monkeypatch.setattr(registry, "_BY_ID", dict(registry._BY_ID))
    monkeypatch.setattr(registry, "_BY_CLASS_NAME", dict(registry._BY_CLASS_NAME))


def _echo_class() -> type[CompositeRetriever]:
    class EchoComposite(CompositeRetriever):
        """Re-weights its base's ranking by a fixed exponent (a minimal composite)."""

        retriever_id: ClassVar[str] = "test-echo"
        default_base: ClassVar[str] = "dr"

        def __init__(
            self, *, base: ToolRetriever | None = None, power: float = 2.0, seed: int = 0
        ) -> None:
            self.base = base
            self.power = power
            self.seed = seed

        def _fit_composite(self, demos: Any, tools: Any) -> None:
            self.fitted_power_ = float(self.power)

        def _score(self, query: str, history: tuple[str, ...]) -> Scores:
            p = self.fitted_base().rank(query, history).probabilities ** self.fitted_power_
            return Scores(p / p.sum(), {"base": self.fitted_base().retriever_id}, over_current=True)

        def _state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
            return {"power": self.fitted_power_}, {}

        def _set_state(self, state: Mapping[str, Any], arrays: Mapping[str, np.ndarray]) -> None:
            self.fitted_power_ = float(state["power"])

    return EchoComposite


def test_every_id_builds_its_class_and_variants_apply_presets() -> None:
    for rid in retriever_ids():
        assert isinstance(make_retriever(rid, lenient=True), ToolRetriever)
    assert make_retriever("dtdr-l-s").get_params()["history"] == "structured"
    assert make_retriever("dtdr-c-paper").get_params()["backoff"] is False
    assert type(make_retriever("dtdr-l-s")) is DTDRL
    assert type(make_retriever("dtdr-c", order=2)) is DTDRC


def test_default_bench_ids_come_from_the_classes() -> None:
    ids = default_bench_ids()
    for rid in ("random", "bm25", "qts", "tgr", "lim", "dr", "lr", "dtdr-c", "dtdr-l", "dtdr-l-s"):
        assert rid in ids
    assert "dtdr-c-paper" not in ids
    assert len(ids) == len(set(ids))


def test_bad_ids_and_params_are_clear_errors() -> None:
    with pytest.raises(ValueError, match=r"unknown retriever 'nosuch'.*dtdr-c"):
        make_retriever("nosuch")
    with pytest.raises(ValueError, match="non-empty"):
        make_retriever("  ")
    with pytest.raises(
        ValueError, match=r"no retriever in 'dtdr-c' accepts parameter\(s\) \['bogus'\]"
    ):
        make_retriever("dtdr-c", bogus=1)
    with pytest.raises(ValueError, match="'qts' is not a composite"):
        make_retriever("qts:bm25")
    assert isinstance(make_retriever("dtdr-c", lenient=True, bogus=1), DTDRC)


def test_a_taken_id_cannot_be_registered_again(scratch_registry: None) -> None:
    with pytest.raises(ValueError, match=r"'qts' .* already registered"):

        class Impostor(QTSRetriever):
            retriever_id: ClassVar[str] = "qts"

    with pytest.raises(ValueError, match="not valid"):

        class Colon(QTSRetriever):
            retriever_id: ClassVar[str] = "a:b"


def test_composite_ids_route_each_parameter_to_who_accepts_it(scratch_registry: None) -> None:
    _echo_class()
    assert "test-echo:<base>" in composite_ids()
    model = make_retriever("test-echo:dtdr-c", power=3.0, order=2, seed=5)
    assert model.get_params()["power"] == 3.0
    base = model.get_params()["base"]
    assert isinstance(base, DTDRC)
    assert (base.order, base.seed, model.get_params()["seed"]) == (2, 5, 5)
    nested = make_retriever("test-echo:test-echo:qts")
    assert type(nested.get_params()["base"].get_params()["base"]) is QTSRetriever
    given = make_retriever("test-echo", base=make_retriever("qts"))
    assert type(given.get_params()["base"]) is QTSRetriever
    assert type(make_retriever("test-echo").get_params()["base"]).retriever_id == "dr"
    with pytest.raises(ValueError, match="do not also pass base"):
        make_retriever("test-echo:qts", base=make_retriever("bm25"))
    with pytest.raises(ValueError, match="names no base"):
        make_retriever("test-echo:")


def test_composite_saves_its_base_in_a_subfolder(
    scratch_registry: None, demo_data: Any, demo_split: Any, tmp_path: Path
) -> None:
    _echo_class()
    model = make_retriever("test-echo:dtdr-c", encoder="tfidf", seed=1, power=2.0)
    model.fit(demo_split[0][:120], demo_data.tools)
    path = model.save(tmp_path / "m")
    assert {p.name for p in path.iterdir()} == {"manifest.json", "arrays.safetensors", "base"}
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["children"] == ["base"]
    assert "base" not in manifest["params"]
    assert json.loads((path / "base" / "manifest.json").read_text())["class"] == "DTDRC"
    loaded = load_retriever(path)
    assert type(loaded.get_params()["base"]) is DTDRC
    for query, history in [("Email the report to Anna", ("get_email_address",)), ("text Bob", ())]:
        np.testing.assert_allclose(
            loaded.rank(query, history).probabilities,
            model.rank(query, history).probabilities,
            rtol=0,
            atol=1e-9,
        )

    broken = tmp_path / "broken"
    shutil.copytree(path, broken)
    shutil.rmtree(broken / "base")
    with pytest.raises(ModelLoadError, match="nested retriever 'base' is missing"):
        load_retriever(broken)

    other = Toolset([*demo_data.tools, Tool("book_flight", "Book a flight")])
    with pytest.raises(ModelLoadError, match="another tool catalogue"):
        load_retriever(path, tools=other)


def test_catalogue_changes_reach_the_base(
    scratch_registry: None, demo_data: Any, demo_split: Any
) -> None:
    _echo_class()
    model = make_retriever("test-echo:dr", encoder="tfidf").fit(demo_split[0][:80], demo_data.tools)
    model.set_tools([t for t in demo_data.tools if t.name != "compose_email"])
    assert "compose_email" not in model.fitted_base().tools_.names
    assert "compose_email" not in model.rank("email Anna").names


# ------------------------------------------------------------------------------ import graph
def _module_imports(path: Path, package_root: Path) -> set[str]:
    """`dtdr_agents` modules imported by a file, outside `if TYPE_CHECKING:` blocks."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("dtdr_agents"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dtdr_agents"):
            assert node.module is not None
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                is_module = (package_root.parent / (sub.replace(".", "/") + ".py")).exists() or (
                    package_root.parent / sub.replace(".", "/") / "__init__.py"
                ).exists()
                found.add(sub if is_module else node.module)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def test_the_core_has_no_import_cycles() -> None:
    root = Path(dtdr_agents.__file__).parent
    graph: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        rel = path.relative_to(root.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        graph[name] = {m for m in _module_imports(path, root) if m != name}
    # a package's __init__ importing its own submodules is how packages work, not a cycle
    edges = {
        name: {
            m
            for m in deps
            if not (
                name == m.rsplit(".", 1)[0]
                and (root.parent / name.replace(".", "/") / "__init__.py").exists()
            )
        }
        for name, deps in graph.items()
    }
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(edges.get(node, ())):
            if state.get(dep) == 1:
                cycle = [*stack[stack.index(dep) :], dep]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if dep not in state:
                dfs(dep)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            dfs(node)


def test_core_import_stays_framework_free() -> None:
    import subprocess
    import sys

    code = (
        "import sys, dtdr_agents, dtdr_agents.cli, dtdr_agents.evaluation.bench;"
        "bad=[m for m in sys.modules if m.split('.')[0] in "
        "('langchain','langchain_core','langgraph','llama_index','mcp')];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
