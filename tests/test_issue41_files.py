"""Issue 41, items 1, 2, 3 and 7: no damage from our own files, bounded saves, checked loads.

1. A save removes only what it made itself: user folders named like ours survive.
2. One huge request cannot make a model that no load accepts; a save that a load would refuse
   is refused before anything is written; a folder we wrote can always be replaced.
3. Every learned array is range-checked at load, naming the array in `arrays.safetensors`;
   a ranking that cannot be used is a typed `RankingError` (`error: ...` on the command line).
7. A FIFO as demonstrations file, `-o file.txt/model`, an HTML page from a chat endpoint,
   and repository paths in a result's provenance.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dtdr_agents import DTDRC, load_retriever
from dtdr_agents.cli import main
from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.foundation import atomic, persistence
from dtdr_agents.foundation.chat import OpenAIChat, check_completion
from dtdr_agents.foundation.errors import (
    ChatModelError,
    ModelArrayError,
    ModelLoadError,
    ModelSaveError,
    RankingError,
)
from dtdr_agents.foundation.manifest import manifest_digest, tool_order_digest
from dtdr_agents.foundation.retry import EndpointFaultError
from dtdr_agents.foundation.types import Demonstration
from dtdr_agents.retrievers.linear import StaticLR

FIX = Path(__file__).parent / "fixtures" / "datasets" / "jsonl"
DEMOS, TOOLS = FIX / "demos.jsonl", FIX / "tools.json"
DATA = make_demo_dataset(n=60, seed=3)
USER_FOLDERS = (".model.old-backup", ".model.tmp-notes", ".model.old-2024-01-31")


def _fit_argv(out: Path | str, demos: Path | str = DEMOS) -> list[str]:
    fixed = "fit --dataset jsonl --retriever dtdr-c --encoder tfidf --param n_clusters=1"
    return [*fixed.split(), "--path", str(demos), "--tools", str(TOOLS), "-o", str(out)]


def _cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    return code, capsys.readouterr().err


@pytest.fixture(scope="module")
def dtdrc() -> DTDRC:
    """A small fitted TF-IDF DTDR-C with two clusters."""
    return DTDRC(encoder="tfidf", n_clusters=2).fit(list(DATA.demos), DATA.tools)


def _arrays(folder: Path) -> dict[str, np.ndarray]:
    from safetensors.numpy import load

    return {k: v.copy() for k, v in load((folder / "arrays.safetensors").read_bytes()).items()}


def _reseal(
    folder: Path,
    edit: Callable[[dict[str, np.ndarray]], None],
    manifest: dict[str, Any] | None = None,
) -> None:
    """Edit a saved model's arrays and recompute every hash (as an attacker or a bug could)."""
    from safetensors.numpy import save

    if manifest is None:
        manifest = json.loads((folder / "manifest.json").read_text())
    arrays = _arrays(folder)
    edit(arrays)
    data = save(arrays, metadata={"tools_sha256": tool_order_digest(manifest)})
    manifest["arrays"] = {
        k: {"dtype": v.dtype.str, "shape": list(v.shape)} for k, v in sorted(arrays.items())
    }
    manifest["integrity"]["arrays_sha256"] = hashlib.sha256(data).hexdigest()
    manifest["integrity"]["manifest_sha256"] = manifest_digest(manifest)
    (folder / "arrays.safetensors").write_bytes(data)
    (folder / "manifest.json").write_text(json.dumps(manifest))


# ------------------------------------------------------------------- 1. user folders survive


def _make_user_folders(parent: Path) -> None:
    for name in USER_FOLDERS:
        (parent / name).mkdir()
        (parent / name / "mine.txt").write_text(f"the user's {name}")


def _assert_user_folders_kept(parent: Path) -> None:
    for name in USER_FOLDERS:
        assert (parent / name / "mine.txt").read_text() == f"the user's {name}", name


def test_fit_o_keeps_user_folders_named_like_a_saves_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    _make_user_folders(tmp_path)
    assert _cli(_fit_argv("model"), capsys)[0] == 0  # a new folder
    assert _cli(_fit_argv("model"), capsys)[0] == 0  # replacing our own model
    _assert_user_folders_kept(tmp_path)
    load_retriever(tmp_path / "model")


def test_save_without_the_atomic_exchange_keeps_user_folders(
    dtdrc: DTDRC, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(atomic, "_swap_dirs", lambda new, target: False)  # macOS, Windows
    _make_user_folders(tmp_path)
    dtdrc.save(tmp_path / "model")
    dtdrc.save(tmp_path / "model")
    _assert_user_folders_kept(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*USER_FOLDERS, "model"])


def test_what_a_killed_save_may_have_left_is_named_not_removed(
    dtdrc: DTDRC, tmp_path: Path
) -> None:
    left = tmp_path / ".model.tmp-999999-0123abcd"
    left.mkdir()
    (left / "manifest.json").write_text("{}")
    with pytest.warns(UserWarning, match=r"\.model\.tmp-999999-0123abcd.*nothing was removed"):
        dtdrc.save(tmp_path / "model")
    assert (left / "manifest.json").read_text() == "{}"


def test_fit_o_names_the_leftover_in_one_warning_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".model.old-4242-89abcdef").mkdir()
    code, err = _cli(_fit_argv("model"), capsys)
    assert code == 0
    assert "warning: " in err and ".model.old-4242-89abcdef" in err
    assert "UserWarning" not in err
    assert (tmp_path / ".model.old-4242-89abcdef").is_dir()


# ------------------------------------------------------- 2. a save a load would refuse


def test_a_huge_word_in_one_request_is_not_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    huge = Demonstration("weather " + "x" * 300_000 + " and " + "y" * 300_000, ("get_weather",))
    demos = [*DATA.demos, huge] if "get_weather" in DATA.tools.names else None
    if demos is None:
        first = DATA.demos[0]
        demos = [*DATA.demos, Demonstration(huge.query, first.calls)]
    model = DTDRC(encoder="tfidf", n_clusters=1).fit(demos, DATA.tools)
    vocabulary = model.encoder_.state()[0]["vocabulary"]  # type: ignore[union-attr]
    assert max(map(len, vocabulary)) <= 2 * 100 + 1
    out = model.save(tmp_path / "m")
    assert (out / "manifest.json").stat().st_size < 200_000  # the 600 kB of "words" are not in it
    monkeypatch.setattr(persistence, "MAX_MANIFEST_BYTES", 200_000)
    assert load_retriever(out).rank("weather in Oslo").names


def test_a_save_over_the_load_cap_is_refused_before_writing(
    dtdrc: DTDRC, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(persistence, "MAX_MANIFEST_BYTES", 1024)
    with pytest.raises(
        ModelSaveError, match=r"manifest\.json would take .*MAX_MANIFEST_BYTES.*field"
    ):
        dtdrc.save(tmp_path / "m")
    assert list(tmp_path.iterdir()) == []


def test_fit_o_over_the_load_cap_is_an_error_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(persistence, "MAX_MANIFEST_BYTES", 1024)
    code, err = _cli(_fit_argv(tmp_path / "m"), capsys)
    assert code == 2
    assert "error: cannot save DTDRC" in err and "nothing was written" in err
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_a_model_with_a_manifest_over_the_cap_can_be_replaced(
    dtdrc: DTDRC, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An earlier version wrote manifests a load refuses: a later save may replace them."""
    out = dtdrc.save(tmp_path / "m")
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["padding"] = "p" * 200_000  # as the vocabulary of an earlier version's model
    (out / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.setattr(persistence, "MAX_MANIFEST_BYTES", 100_000)
    with pytest.raises(ModelLoadError, match="MAX_MANIFEST_BYTES"):
        load_retriever(out)
    assert dtdrc.save(out) == out
    assert load_retriever(out).rank("Email Anna").names


# ------------------------------------------------------------- 3. ranges checked at load


@pytest.fixture
def saved(dtdrc: DTDRC, tmp_path: Path) -> Path:
    """A fresh copy of the fitted DTDR-C on disk."""
    return dtdrc.save(tmp_path / "model")


def _set(
    name: str, change: Callable[[np.ndarray], None]
) -> Callable[[dict[str, np.ndarray]], None]:
    def edit(arrays: dict[str, np.ndarray]) -> None:
        change(arrays[name])

    return edit


@pytest.mark.parametrize("value", [-15.0, -1e6, 0.0])
def test_markov_counts_out_of_range_are_refused_naming_the_array(saved: Path, value: float) -> None:
    def edit(counts: np.ndarray) -> None:
        counts[: len(counts) // 2] = value

    _reseal(saved, _set("model/markov_counts", edit))
    with pytest.raises(ModelArrayError) as info:
        load_retriever(saved)
    message = str(info.value)
    assert message.startswith(f"{saved / 'arrays.safetensors'}: array 'model/markov_counts'")
    assert "counts > 0" in message and "manifest.json" not in message


@pytest.mark.parametrize(
    ("column", "value", "what"),
    [(-1, 10_000, "next label"), (0, 99, "cluster"), (2, 10_000, "history key"), (1, 7, "order")],
)
def test_markov_rows_out_of_range_name_the_array_not_the_manifest(
    saved: Path, column: int, value: int, what: str
) -> None:
    def edit(rows: np.ndarray) -> None:
        rows[0, column] = value

    _reseal(saved, _set("model/markov_rows", edit))
    with pytest.raises(ModelArrayError, match=what) as info:
        load_retriever(saved)
    assert str(info.value).startswith(f"{saved / 'arrays.safetensors'}: array 'model/markov_rows'")


def test_a_duplicated_markov_row_is_refused(saved: Path) -> None:
    def edit(arrays: dict[str, np.ndarray]) -> None:
        arrays["model/markov_rows"][1] = arrays["model/markov_rows"][0]

    _reseal(saved, edit)
    with pytest.raises(ModelArrayError, match="same transition twice"):
        load_retriever(saved)


def test_a_negative_idf_is_refused_naming_the_encoder_array(saved: Path) -> None:
    def edit(idf: np.ndarray) -> None:
        idf[3] = -2.0

    _reseal(saved, _set("encoder/idf", edit))
    # record the edited encoder's id too, so that only the range check can refuse it
    manifest = json.loads((saved / "manifest.json").read_text())
    arrays = _arrays(saved)
    digest = hashlib.sha256("\n".join(manifest["encoder"]["state"]["vocabulary"]).encode())
    digest.update(arrays["encoder/idf"].tobytes())
    digest.update(arrays["encoder/components"].tobytes())
    manifest["encoder"]["id"] = f"tfidf:{digest.hexdigest()[:12]}"
    _reseal(saved, lambda arrays: None, manifest)
    with pytest.raises(ModelArrayError, match=r"arrays\.safetensors: array 'encoder/idf'"):
        load_retriever(saved)


def test_a_non_positive_ood_precision_is_refused(tmp_path: Path) -> None:
    model = StaticLR(encoder="tfidf", epochs=2).fit(list(DATA.demos[:20]), DATA.tools)
    out = model.save(tmp_path / "l")

    def edit(precision: np.ndarray) -> None:
        precision[:] = -np.eye(len(precision))

    _reseal(out, _set("model/ood_precision", edit))
    with pytest.raises(ModelArrayError, match="'model/ood_precision' must be positive semi"):
        load_retriever(out)


def test_cli_rank_of_resealed_negative_counts_is_an_error_not_a_ranking(
    saved: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def edit(counts: np.ndarray) -> None:
        counts[:] = -1e6

    _reseal(saved, _set("model/markov_counts", edit))
    code, err = _cli(["rank", "--model", str(saved), "--query", "Email Anna"], capsys)
    assert code == 2
    assert err.startswith("error: ") and "model/markov_counts" in err
    assert "Traceback" not in err


def test_a_ranking_that_cannot_be_used_is_a_typed_error_on_the_command_line(
    saved: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = DTDRC._score

    def broken(self: DTDRC, query: str, history: tuple[str, ...]) -> Any:
        scores = real(self, query, history)
        scores.probabilities[0] = np.nan
        return scores

    monkeypatch.setattr(DTDRC, "_score", broken)
    with pytest.raises(RankingError, match=r"DTDRC\.rank: .*not finite"):
        load_retriever(saved).rank("Email Anna")
    code, err = _cli(["rank", "--model", str(saved), "--query", "Email Anna"], capsys)
    assert code == 2
    assert err.startswith("error: DTDRC.rank:") and "Traceback" not in err


# ------------------------------------------------------------------------ 7. smaller ones


def test_a_fifo_as_demonstrations_file_is_named_as_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fifo = tmp_path / "demos.jsonl"
    os.mkfifo(fifo)
    code, err = _cli(_fit_argv(tmp_path / "m", demos=fifo), capsys)
    assert code == 2
    assert "named pipe (FIFO), not a regular file" in err and "not found" not in err


def test_o_inside_a_file_says_the_parent_is_not_a_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file.txt").write_text("mine")
    code, err = _cli(_fit_argv(tmp_path / "file.txt" / "model"), capsys)
    assert code == 2
    assert f"{tmp_path / 'file.txt'} is a file, not a folder" in err
    assert "File exists" not in err
    assert (tmp_path / "file.txt").read_text() == "mine"


def test_an_html_page_is_described_as_not_json() -> None:
    with pytest.raises(EndpointFaultError, match=r"not JSON .*<html>"):
        check_completion("<html><body><h1>502 Bad Gateway</h1></body></html>")


class _HTMLHandler(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = b"<html><body>Service unavailable</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default logging."""


@pytest.fixture
def html_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A loopback endpoint that answers every request with an HTML page and HTTP 200."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HTMLHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def test_an_html_page_from_an_endpoint_is_reported_as_not_json(html_endpoint: str) -> None:
    pytest.importorskip("openai")
    chat = OpenAIChat("m", base_url=html_endpoint, max_retries=0, timeout=10)
    with pytest.raises(ChatModelError, match="not JSON") as info:
        chat.create([{"role": "user", "content": "hi"}], sleep=lambda seconds: None)
    assert "no choices" not in str(info.value)


def test_provenance_records_checkout_paths_relative_to_it(tmp_path: Path) -> None:
    from dtdr_agents.evaluation import report

    root = report._repo_root()
    if root is None:
        pytest.skip("not running from a git checkout")
    argv = [
        "e2e",
        "--path",
        f"{root}/../shared/datasets/sealtools",
        "--step-cache",
        f"{root}/docs/results/x.json.steps.jsonl",
        f"--json={root}/docs/results/x.json",
        "--plot",
        str(tmp_path / "x.png"),
    ]
    command = report.provenance([0], argv)["command"]
    assert str(root) not in command
    assert "--path ../shared/datasets/sealtools" in command
    assert "--step-cache docs/results/x.json.steps.jsonl" in command
    assert "--json=docs/results/x.json" in command
    assert f"--plot {tmp_path / 'x.png'}" in command  # a path outside the checkout is kept
