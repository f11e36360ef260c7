"""Issue 40, item 4, "the first hour": each bit of friction a new user met, one test each.

1. The LICENSE is the Apache-2.0 text and ships in the wheel.
2. Importing an integration whose extra is missing names the extra to install.
3. The command line: `fit --no-demos`, errors in flags (not Python keywords), `--tools` or
   `--infer-tools`, "did you mean", `--skip-bad` on the run store, plurals.
4. `StepSelector.select` gives a `StepRecord`; `.names` are the selected tools.
5. Progress: plain lines off a terminal; `fit(progress=True)` from Python.
6. The hybrid's `why`: shared facts once per ranking, each tool's own evidence in words.
"""

from __future__ import annotations

import hashlib
import io
import re
import shutil
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_first_hour import _run  # main(argv) -> (exit status, stdout, stderr)

ROOT = Path(__file__).resolve().parents[1]
FIX = ROOT / "tests" / "fixtures" / "datasets" / "jsonl"
DEMOS, TOOLS = FIX / "demos.jsonl", FIX / "tools.json"


APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"
"""sha256 of https://www.apache.org/licenses/LICENSE-2.0.txt, the standard text."""


# ------------------------------------------------------------------------ 1. the license


def test_license_is_the_standard_apache_2_text() -> None:
    license_bytes = (ROOT / "LICENSE").read_bytes()
    assert hashlib.sha256(license_bytes).hexdigest() == APACHE_2_SHA256
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    assert project["license-files"] == ["LICENSE"]


def test_the_wheel_ships_the_license(tmp_path: Path) -> None:
    src = tmp_path / "src"  # a copy, so the build leaves no build/ folder in the checkout
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("dtdr_agents", "integrations"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    out = tmp_path / "wheel"
    build = ["wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q"]
    subprocess.run(
        [sys.executable, "-m", "pip", *build, "-w", str(out), str(src)], check=True, timeout=240
    )
    (wheel,) = out.glob("dtdr_agents-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        shipped = [n for n in archive.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
        assert len(shipped) == 1, archive.namelist()
        assert archive.read(shipped[0]) == (ROOT / "LICENSE").read_bytes()
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(metadata).decode()
    assert "License-Expression: Apache-2.0" in text and "License-File: LICENSE" in text


# ---------------------------------------------- 2. a missing extra names what to install

BLOCKER = textwrap.dedent(
    """
    import sys

    class Blocker:  # as if the extra were not installed
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Blocker())
    try:
        __import__(PACKAGE)
    except ImportError as exc:
        print(type(exc).__name__ + ": " + str(exc))
        print("name=" + str(exc.name))
    else:
        print("imported")
    """
)


def _import_without(package: str, blocked: tuple[str, ...]) -> str:
    code = f"BLOCKED = {blocked!r}\nPACKAGE = {package!r}\n{BLOCKER}"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    return done.stdout


@pytest.mark.parametrize(
    ("package", "blocked", "extra", "missing"),
    [
        ("langchain_dtdr", ("langchain_core",), "langchain", "langchain_core"),
        ("langgraph_dtdr", ("langgraph",), "langgraph", "langgraph"),
        ("langgraph_dtdr", ("langchain_core", "langgraph"), "langgraph", "langchain_core"),
        ("llama_index_dtdr", ("llama_index",), "llamaindex", "llama_index"),
        ("mcp_dtdr", ("mcp",), "mcp", "mcp"),
    ],
)
def test_importing_an_integration_without_its_extra_names_the_extra(
    package: str, blocked: tuple[str, ...], extra: str, missing: str
) -> None:
    printed = _import_without(package, blocked)
    hint = f"ImportError: {package} needs the {extra} extra: pip install 'dtdr-agents[{extra}]'"
    assert printed.startswith(hint), printed
    assert f"No module named '{missing}" in printed  # the original reason is kept
    assert f"name={missing}" in printed
    assert printed.count("needs the") == 1  # nested packages: one hint, the outer one's


def test_a_missing_module_outside_the_extra_is_not_disguised() -> None:
    printed = _import_without("langgraph_dtdr", ("dtdr_agents_no_such_dependency", "tenacity"))
    assert "needs the" not in printed  # tenacity is a core dependency: no extra brings it
    assert "ModuleNotFoundError: No module named 'tenacity'" in printed


def test_the_lazy_middleware_names_the_langchain_extra() -> None:
    code = f"BLOCKED = ('langchain',)\nPACKAGE = 'langchain_dtdr'\n{BLOCKER}\n"
    code += (
        "import langchain_dtdr\n"
        "try:\n    langchain_dtdr.DTDRMiddleware\n"
        "except ImportError as exc:\n    print('lazy:', exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert "imported" in done.stdout
    assert "lazy: langchain_dtdr.middleware needs the langchain extra" in done.stdout


# -------------------------------------------------------------------- 3. the command line


def test_fit_no_demos_fits_on_the_tools_file_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "model"
    argv = ["fit", "--no-demos", "--tools", str(TOOLS), "--encoder", "tfidf", "-o", str(model)]
    code, out, err = _run(argv, capsys)
    assert code == 0, err
    assert "on 0 demonstrations, 3 tools" in err and f"saved hybrid to {model}" in out
    rank = ["rank", "--model", str(model), "--query", "book a flight from Oslo to Rome", "-k", "2"]
    code, out, err = _run(rank, capsys)
    assert code == 0, err
    rows = [line for line in out.splitlines() if not line.startswith("note:")]
    assert rows[0].split()[1] in {"search_flights", "book_flight"}


def test_fit_no_demos_with_a_dataset_takes_its_catalogue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = ["--dataset", "jsonl", "--path", str(DEMOS), "--tools", str(TOOLS)]
    argv = ["fit", *data, "--no-demos", "--encoder", "tfidf", "-o", str(tmp_path / "m")]
    code, _, err = _run(argv, capsys)
    assert code == 0, err
    assert "on 0 demonstrations, 3 tools" in err
    code, _, err = _run([*argv[:-1], str(tmp_path / "m0"), "--limit", "0"], capsys)
    assert code == 2 and "--no-demos fits on no demonstrations; drop --limit" in err
    limit0 = ["fit", *data, "--limit", "0", "--encoder", "tfidf", "-o", str(tmp_path / "m2")]
    code, _, err = _run(limit0, capsys)  # the older spelling still works
    assert code == 0, err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["fit", "--no-demos"], "--no-demos fits on the tool catalogue alone: give it as --tools"),
        (["fit", "--tools", str(TOOLS)], "fit needs --dataset ID --path FILE"),
        (["fit", "--dataset", "jsonl", "--tools", str(TOOLS)], "--dataset jsonl needs --path: a"),
        (["fit", "--dataset", "taskbench"], "--dataset taskbench needs --path: a TaskBench"),
        (["fit", "--dataset", "jsonl", "--path", str(DEMOS)], "--dataset jsonl needs --tools FILE"),
    ],
    ids=["no-demos without tools", "no dataset", "no path", "taskbench no path", "no tools"],
)
def test_fit_errors_name_the_flags(
    argv: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run([*argv, "--encoder", "tfidf", "-o", str(tmp_path / "m")], capsys)
    assert code == 2
    assert expected in err
    assert "load_dataset" not in err and "tools_path" not in err and "path=" not in err
    assert not (tmp_path / "m").exists()


def test_bench_errors_name_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(["bench", "--dataset", "jsonl", "--encoder", "tfidf", "-q"], capsys)
    assert code == 2 and "error: --dataset jsonl needs --path: a JSON-lines file" in err
    argv = ["bench", "--dataset", "taskbench", "--path", str(FIX), "--tools", str(TOOLS), "-q"]
    code, _, err = _run([*argv, "--encoder", "tfidf"], capsys)
    assert code == 2 and "--tools is unused" in err and "tools_path" not in err


def test_fit_without_tools_says_the_consequence_and_infer_tools_opts_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["fit", "--dataset", "jsonl", "--path", str(DEMOS), "--retriever", "dtdr-c"]
    argv += ["--encoder", "tfidf", "-o", str(tmp_path / "m")]
    code, _, err = _run(argv, capsys)
    assert code == 2
    assert "--infer-tools" in err and "no descriptions" in err and "never offered" in err
    code, _, err = _run([*argv, "--infer-tools"], capsys)
    assert code == 0, err
    assert "loader: 1 problem (kept 1)" in err  # one problem, not "1 problems"
    assert "built the catalogue of 3 tools from the call names" in err


def test_rank_unknown_history_names_the_flag_and_the_close_tool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "model"
    fit = ["fit", "--dataset", "jsonl", "--path", str(DEMOS), "--tools", str(TOOLS)]
    code, _, err = _run(
        [*fit, "--retriever", "dtdr-c", "--encoder", "tfidf", "-o", str(model)], capsys
    )
    assert code == 0, err
    rank = ["rank", "--model", str(model), "--query", "fly to Rome"]
    code, _, err = _run([*rank, "--history", "serch_flights"], capsys)
    assert code == 2
    assert "--history names tools that are not in the model's catalogue: 'serch_flights'" in err
    assert "(did you mean 'search_flights'?)" in err
    assert "--ignore-unknown" in err and "ignore_unknown=True" not in err
    code, _, err = _run([*rank, "--history", "serch_flights", "--ignore-unknown"], capsys)
    assert code == 0, err


def test_python_unknown_history_suggests_the_close_tool() -> None:
    from dtdr_agents import Demonstration, make_retriever
    from dtdr_agents.foundation.errors import UnknownToolError

    tools = [
        {"name": "search_flights", "description": "Find flights"},
        {"name": "book_flight", "description": "Book a flight"},
    ]
    demos = [Demonstration("fly to Rome", ("search_flights", "book_flight"))]
    model = make_retriever("dtdr-c", encoder="tfidf", n_clusters=1).fit(demos, tools)
    with pytest.raises(UnknownToolError, match=r"did you mean 'book_flight'\?\)") as err:
        model.rank("fly", ["Book_Flights"])
    assert "pass ignore_unknown=True" in str(err.value)  # Python names its keyword


def test_unknown_tool_in_a_demonstrations_line_suggests_the_close_tool(tmp_path: Path) -> None:
    from dtdr_agents.datasets.jsonl import load_jsonl

    path = tmp_path / "demos.jsonl"
    path.write_text(DEMOS.read_text() + '{"query": "fly", "calls": ["search_flight", "zzz"]}\n')
    data = load_jsonl(path, TOOLS, skip_bad=True)
    (problem,) = data.problems
    assert problem.where == f"{path}:5"
    assert "(did you mean 'search_flights' for 'search_flight'?)" in problem.message


def test_fit_skip_bad_skips_a_stored_run_that_names_an_unknown_tool(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dtdr_agents import Demonstration
    from dtdr_agents.store import RunRecord, RunStore

    db = f"sqlite:///{tmp_path / 'runs.db'}"
    runs = [
        Demonstration("Fly me from Oslo to Rome", ("search_flights", "book_flight")),
        Demonstration("Weather in Rome", ("get_weather",)),
        Demonstration("Book a fligth", ("serch_flights", "book_flight")),  # a typo in the run
    ]
    with RunStore(db) as store:
        store.add_many(RunRecord.from_demonstration(d) for d in runs)
    argv = ["fit", "--dataset", "store", "--path", db, "--tools", str(TOOLS)]
    argv += ["--retriever", "dtdr-c", "--encoder", "tfidf"]
    code, _, err = _run([*argv, "-o", str(tmp_path / "m0")], capsys)
    assert code == 2
    assert "calls[0] = 'serch_flights'" in err and "did you mean 'search_flights'?" in err
    assert "--skip-bad" in err and not (tmp_path / "m0").exists()
    code, _, err = _run([*argv, "--skip-bad", "-o", str(tmp_path / "m")], capsys)
    assert code == 0, err
    assert "loader: 1 problem (skipped 1)" in err
    assert "fitting dtdr-c on 2 demonstrations, 3 tools" in err


def test_one_demonstration_is_one_demonstration() -> None:
    from dtdr_agents import Demonstration, make_retriever

    tools = [{"name": "a", "description": "first tool"}, {"name": "b", "description": "second"}]
    one = make_retriever("hybrid", encoder="tfidf").fit([Demonstration("do a", ("a",))], tools)
    assert one.rank("do a").explanation["zero_shot"] == "1 demonstration: nothing to cross-fit"


def test_counts_take_the_right_plural(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dtdr_agents.datasets.base import Problem
    from dtdr_agents.datasets.stats import problem_summary
    from dtdr_agents.foundation.words import plural

    assert problem_summary([Problem("f:1", "skipped: x")]) == "1 problem (skipped 1)"
    assert problem_summary([Problem("f:1", "kept: x")] * 2) == "2 problems (kept 2)"
    assert (plural(1, "demonstration"), plural(0, "tool")) == ("1 demonstration", "0 tools")
    path = tmp_path / "one.jsonl"
    path.write_text(DEMOS.read_text().splitlines()[0] + "\n")
    argv = ["fit", "--dataset", "jsonl", "--path", str(path), "--tools", str(TOOLS)]
    code, _, err = _run([*argv, "--retriever", "dr", "-o", str(tmp_path / "m")], capsys)
    assert code == 0, err
    assert "fitting dr on 1 demonstration, 3 tools" in err


# ------------------------------------------------ 4. what StepSelector.select returns


def test_a_step_record_gives_the_selected_names() -> None:
    from dtdr_agents import Demonstration, SelectionPolicy, make_retriever
    from dtdr_agents.runtime import StepRecord, StepSelector

    tools = [
        {"name": "search_flights", "description": "Find flights between two cities"},
        {"name": "book_flight", "description": "Book a flight found by search_flights"},
        {"name": "get_weather", "description": "Weather forecast for a city"},
    ]
    demos = [Demonstration("fly to Rome", ("search_flights", "book_flight"))] * 3
    retriever = make_retriever("dtdr-c", encoder="tfidf", n_clusters=1).fit(demos, tools)
    selector = StepSelector(tools, retriever, policy=SelectionPolicy(k=2, threshold=None))
    record = selector.select("fly to Rome", ["search_flights"])
    assert not record.selection.fallback
    assert isinstance(record, StepRecord)
    assert record.names == record.selection.names and len(record.names) == 2
    assert record.names[0] == "book_flight"
    assert set(record.bound) == set(record.names)  # no cache: exactly the selection is bound
    assert record.to_record()["selected"] == list(record.names)


# -------------------------------------------------------------------------- 5. progress


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_off_a_terminal_is_plain_lines(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from dtdr_agents.foundation import progress

    monkeypatch.setattr(progress, "PLAIN_INTERVAL_S", 0.0)
    wrap = progress.progress_bar(True)
    assert wrap is not None
    assert list(wrap(range(50), "encode", 50)) == list(range(50))
    err = capsys.readouterr().err  # pytest's capture is not a terminal, as a log file is not
    assert "\r" not in err
    lines = err.splitlines()
    assert len(lines) >= 2 and all(line.startswith("encode:") for line in lines)
    assert "50/50" in lines[-1]  # the last line says where it ended


def test_progress_on_a_terminal_is_a_bar_redrawn_in_place() -> None:
    from dtdr_agents.foundation.progress import PLAIN_INTERVAL_S, bar_options

    terminal, log = _Terminal(), io.StringIO()
    assert bar_options(terminal)["file"] is terminal and not bar_options(terminal)["leave"]
    plain = bar_options(log)
    assert plain["file"] is not log and plain["mininterval"] == PLAIN_INTERVAL_S >= 5
    plain["file"].write("\rfit hybrid: 3 s")
    plain["file"].write("\r" + " " * 20 + "\r")  # tqdm erasing a bar: nothing to log
    assert log.getvalue() == "fit hybrid: 3 s\n"


def test_fit_from_python_shows_progress_when_asked(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from dtdr_agents import Demonstration, make_retriever
    from dtdr_agents.foundation import progress

    monkeypatch.setattr(progress, "TICK_DELAY_S", 0.0)  # a fast fit shows too
    tools = [{"name": "a", "description": "first"}, {"name": "b", "description": "second"}]
    demos = [Demonstration("do a then b", ("a", "b"))]
    make_retriever("dr", encoder="tfidf").fit(demos, tools)
    assert capsys.readouterr().err == ""  # off unless asked for
    make_retriever("dr", encoder="tfidf").fit(demos, tools, progress=True)
    err = capsys.readouterr().err
    assert "fit dr: 0 s" in err and "\r" not in err


def test_the_demo_shows_progress_while_it_encodes_the_requests(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import dtdr_agents.foundation.encoders as encoders
    from dtdr_agents.datasets.synthetic import make_demo_dataset
    from dtdr_agents.foundation import progress
    from dtdr_agents.foundation.encoders.tfidf import TfidfEncoder

    data = make_demo_dataset(n=60, seed=0)
    fitted = TfidfEncoder().fit([d.query for d in data.demos] + [t.text() for t in data.tools])
    monkeypatch.setattr(encoders, "get_encoder", lambda *a, **k: fitted)  # a fitted model
    monkeypatch.setattr(progress, "PLAIN_INTERVAL_S", 0.0)
    code, _, err = _run(["demo", "--n", "60", "--retrievers", "dr"], capsys)
    assert code == 0, err
    encode = [line for line in err.splitlines() if line.startswith("encode:")]
    assert len(encode) >= 2 and "60/60" in encode[-1]
    assert "\r" not in err


# ------------------------------------------------------------------------- 6. the why text


def _zero_shot_hybrid() -> Any:
    from dtdr_agents import make_retriever

    tools = [
        {"name": "search_recipes", "description": "Search recipes by ingredient or dish"},
        {"name": "get_recipe", "description": "Get the ingredients and steps of a recipe"},
        {"name": "add_to_shopping_list", "description": "Add ingredients to the shopping list"},
        {"name": "order_groceries", "description": "Order the shopping list from a grocer"},
        {"name": "set_timer", "description": "Set a kitchen timer for some minutes"},
        {"name": "convert_units", "description": "Convert cups, grams and ounces"},
    ]
    return make_retriever("hybrid", encoder="tfidf").fit([], tools)


def test_hybrid_why_says_the_shared_facts_once_and_each_tools_own_in_words(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    model = _zero_shot_hybrid()
    ranking = model.rank("Find a leek soup recipe and order the ingredients", ["search_recipes"])
    whys = [t.why for t in ranking.top(None)]
    for shared in ("nothing to cross-fit", "zero-shot stop rule", "candidates=", "sub_goals="):
        assert not any(shared in why for why in whys), shared  # before: in every tool's why
    assert "nothing to cross-fit" in ranking.explanation["zero_shot"]  # kept, once
    assert len({re.sub(r"p=\d\.\d+", "", why) for why in whys}) == len(whys)
    tools = [t for t in ranking.top(None, include_end=False)]
    assert all(re.search(r"raised by|lowered by", t.why) for t in tools[:3])
    assert any(re.search(r"ranked \d+(st|nd|rd|th) by meaning", t.why) for t in tools)
    model.save(tmp_path / "m")
    code, out, err = _run(["rank", "--model", str(tmp_path / "m"), "--query", "leek soup"], capsys)
    assert code == 0, err
    notes = [line for line in out.splitlines() if line.startswith("note: hybrid:")]
    assert len(notes) == 1 and "zero-shot model (0 demonstrations" in notes[0]
    assert "end of plan: zero-shot stop rule p=" in notes[0]
    assert out.count("nothing to cross-fit") == 1


def test_contribution_words_read_as_evidence() -> None:
    from dtdr_agents.retrievers.explain import contribution_words, ranking_words, tool_words

    text = contribution_words([("graph_rank", 1.39), ("dense_rank", -1.1, -1.0986)])
    assert text == (
        "raised by its rank in the tool graph after the last call (graph_rank=+1.39); "
        "lowered by ranked 3rd by meaning (dense_rank=-1.10)"
    )
    assert contribution_words([("bm25_rank", -4.6, -4.615)], unranked=100) == (
        "lowered by no match by the request's words (bm25_rank=-4.60)"
    )
    assert contribution_words([("dense_rank", 0.0)]) == ""
    features = ["dense_rank", "bm25_rank", "end"]
    first = tool_words(features, np.array([0.0, -0.6931, 0.0]), np.array([1.0, 1.0, 0.5]), 4)
    assert first.startswith("raised by ranked 1st by meaning; lowered by ranked 2nd by")
    end = tool_words(features, np.array([0.0, 0.0, 1.0]), np.array([1.0, 1.0, 0.5]), 4)
    assert "ranked 1st" not in end  # end-of-plan's row has no ranks
    words = ranking_words({"method": "hybrid", "candidates": 9, "sub_goals": "clauses"})
    assert words == "hybrid: 9 candidate tools scored; sub-goals from: clauses"
