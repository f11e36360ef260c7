"""Issue 40, item 4, "the first hour": each bit of friction a new user met, one test each.

1. The LICENSE is the Apache-2.0 text and ships in the wheel.
2. Importing an integration whose extra is missing names the extra to install.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import textwrap
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

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
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
        + ["--no-index", "-q", "-w", str(out), str(src)],
        check=True,
        timeout=240,
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
