"""The scale benchmark: catalogues from real tool descriptions expanded by seeded variations."""

from __future__ import annotations

import json

import pytest

from dtdr_agents.evaluation.perf import VARIATION_QUALIFIERS, expand_catalogue, run_scale
from dtdr_agents.foundation.types import Toolset

BASE = Toolset(
    [
        {"name": "get_weather", "description": "Current weather forecast for a city"},
        {"name": "send_email", "description": "Send an email message to a contact"},
        {"name": "book_flight", "description": "Book a plane ticket between two airports"},
    ]
)


def test_expansion_keeps_real_tools_first_and_is_seeded():
    big = expand_catalogue(BASE, 50, seed=1)
    assert len(big) == 50 and len(set(big.names)) == 50
    assert list(big.names[:3]) == list(BASE.names)
    variant = big[3]
    assert variant.name == "get_weather__v1"
    assert variant.description.startswith(BASE[0].description)
    assert any(q in variant.description for q in VARIATION_QUALIFIERS)
    assert len({t.description for t in big}) == 50
    assert expand_catalogue(BASE, 50, seed=1) == big
    assert expand_catalogue(BASE, 50, seed=2) != big
    assert list(expand_catalogue(BASE, 2).names) == ["get_weather", "send_email"]


def test_variants_keep_the_schema_so_the_tool_graph_grows_with_the_catalogue():
    from dtdr_agents.retrievers.tool_graph import ToolGraph

    base = Toolset(
        [
            {"name": "find_city", "description": "Find a city", "outputs": ["city"]},
            {
                "name": "get_weather",
                "description": "Current weather forecast for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        ]
    )
    big = expand_catalogue(base, 6, seed=0)
    assert big[2].outputs == ("city",) and big[3].parameters == base[1].parameters
    # each producer of "city" links to each consumer: 3 x 3 edges, where the base has one
    assert len(ToolGraph.from_catalogue(base)) == 1
    assert len(ToolGraph.from_catalogue(big)) == 9


def test_bad_sizes_are_refused(tmp_path):
    with pytest.raises(ValueError, match="sizes"):
        run_scale([0], datasets_dir=tmp_path)


def test_cli_rejects_bad_sizes(capsys):
    from dtdr_agents.cli import main

    assert main(["speed", "--catalogue-size", "10k"]) == 2
    assert "--catalogue-size" in capsys.readouterr().err


def test_cli_names_missing_datasets(tmp_path, capsys):
    from dtdr_agents.cli import main

    assert main(["speed", "--catalogue-size", "100", "--datasets", str(tmp_path)]) == 2
    assert "sealtools" in capsys.readouterr().err


@pytest.mark.benchmark
@pytest.mark.timeout(1200)  # fits at 8,000 tools: 430 s on a busy 2-core machine
def test_scale_json_holds_every_size(tmp_path, shared_datasets):
    from dtdr_agents.cli import main

    out = tmp_path / "scale.json"
    args = ["speed", "--catalogue-size", "500,8000", "--encoder", "tfidf", "--queries", "30"]
    assert main([*args, "--datasets", str(shared_datasets), "--json", str(out)]) == 0
    sizes = json.loads(out.read_text())["sizes"]
    assert set(sizes) == {"500", "8000"}
    for figures in sizes.values():
        for key in ("fit_s", "index_s", "graph_s", "rank_ms_p50", "rank_ms_p99", "peak_rss_mb"):
            assert figures[key] > 0
    assert sizes["8000"]["n_real_tools"] > 5000  # Seal-Tools plus ToolRet


def test_scale_table_shows_the_graph_build_and_reads_older_files():
    from dtdr_agents.evaluation.docsync import render_scale

    row = {
        "n_tools": 10,
        "n_real_tools": 10,
        "n_demos": 5,
        "index": "exact",
        "fit_s": 1.0,
        "index_s": 0.0,
        "rank_ms_p50": 0.5,
        "rank_ms_p99": 0.9,
        "peak_rss_mb": 100.0,
    }
    data = {
        "machine": {"cpus": 2},
        "encoder": "tfidf",
        "sizes": {"10": row, "20": {**row, "graph_s": 0.25, "graph_edges": 7}},
    }
    table = render_scale(data, "scale.json").splitlines()
    assert "graph_s" in table[0] and "graph_edges" in table[0]
    assert table[2].startswith("| 10 |") and "| - | - |" in table[2]  # written before graph_s
    assert "| 0.250 | 7 |" in table[3]
