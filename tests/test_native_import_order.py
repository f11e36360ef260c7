"""Native libraries that must load in one order: onnxruntime before usearch.

With usearch 2.26 and onnxruntime 1.32 (x86-64 Linux wheels), `import usearch; import
onnxruntime` dies of a segmentation fault. The HNSW index imports onnxruntime first where it
is installed, and the ONNX encoder refuses, with a clear error, to import it after usearch.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

# never import them here: in this order they would crash the test process itself
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("usearch") is None or importlib.util.find_spec("onnxruntime") is None,
    reason="needs usearch and onnxruntime",
)


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_index_then_onnxruntime_does_not_crash():
    done = _run(
        "from dtdr_agents.retrievers.index import hnsw_available\n"
        "assert hnsw_available()\n"
        "import onnxruntime\n"
        "print('both loaded')"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "both loaded" in done.stdout


def test_the_onnx_encoder_refuses_to_load_after_a_foreign_usearch_import():
    done = _run(
        "import usearch.index\n"
        "from dtdr_agents.foundation.encoders.onnx import OnnxEncoder\n"
        "import threading\n"
        "enc = OnnxEncoder.__new__(OnnxEncoder)\n"
        "enc._lock, enc._session = threading.Lock(), None\n"
        "try:\n"
        "    OnnxEncoder._load(enc)\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "import onnxruntime first" in done.stdout
