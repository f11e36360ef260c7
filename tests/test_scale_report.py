"""The scale table says how it was made: the command, the BLAS threads, the machine's load."""

from __future__ import annotations

import pytest

from dtdr_agents.cli import main
from dtdr_agents.evaluation.docsync import render_scale

ROW = {
    "n_tools": 10,
    "n_real_tools": 10,
    "n_demos": 5,
    "index": "exact",
    "fit_s": 1.0,
    "index_s": 0.0,
    "graph_s": 0.25,
    "graph_edges": 7,
    "rank_ms_p50": 0.5,
    "rank_ms_p99": 0.9,
    "peak_rss_mb": 100.0,
}


def test_the_table_names_the_command_threads_load_and_note():
    data = {
        "machine": {"cpus": 2},
        "encoder": "default",
        "blas_threads": 1,
        "provenance": {
            "command": "dtdr-agents speed --catalogue-size 10",
            "commit": "0123456789abcdef",
            "load_average_at_start": [1.5, 1.2, 1.0],
            "note": "One core ran a model sweep.",
        },
        "sizes": {"10": {**ROW, "encode_s": 12.5, "encoded_texts": 3}},
    }
    table = render_scale(data, "scale.json").splitlines()
    assert "encode_s" in table[0]
    assert table[2].startswith("| 10 | 10 | 5 | exact | 12.5 | 1.0 |")
    assert table[-1] == (
        "`scale.json`: `dtdr-agents speed --catalogue-size 10` (commit 0123456, 2 cores, "
        "encoder default, steps timed with 1 BLAS thread, load average at start 1.5). "
        "One core ran a model sweep."
    )
    data["provenance"]["command"] += " --note 'One core ran a model sweep.'"
    assert render_scale(data, "scale.json").endswith("load average at start 1.5).")  # once


def test_a_file_written_before_provenance_keeps_its_short_footer():
    data = {"machine": {"cpus": 2}, "encoder": "default", "sizes": {"10": ROW}}
    table = render_scale(data, "scale.json").splitlines()
    assert "| exact | - | 1.0 |" in table[2]  # no encoding time recorded
    assert table[-1] == "`scale.json`: encoder default, 2 cores."


def test_negative_blas_threads_are_refused(capsys):
    with pytest.raises(SystemExit):
        main(["speed", "--catalogue-size", "10", "--blas-threads", "-1"])
    assert "--blas-threads" in capsys.readouterr().err


def test_the_speed_block_names_its_command_and_the_load():
    from dtdr_agents.evaluation.docsync import render_speed

    data = {
        "machine": {"python": "3.11", "cpus": 2},
        "n_demos": 10,
        "n_test_queries": 2,
        "n_tools": 3,
        "encoder": "tfidf",
        "encoder_load_s": 0.1,
        "fit_s": {"dtdr-c": 1.0},
        "rank": {"dtdr-c per step": {"p50_ms": 0.1, "p99_ms": 0.2, "mean_ms": 0.1, "n": 4}},
        "peak_rss_mb": 100.0,
    }
    assert render_speed(data, "speed.json").endswith("\n\n`speed.json`.")  # an older file
    data["provenance"] = {
        "command": "dtdr-agents speed --n-demos 10",
        "commit": "0123456789",
        "cpu_count": 2,
        "load_average_at_start": [3.25, 2.0, 1.0],
        "note": "Shared machine.",
    }
    assert render_speed(data, "speed.json").endswith(
        "`speed.json`: `dtdr-agents speed --n-demos 10` (commit 0123456, 2 cores, load average "
        "at start 3.25). Shared machine."
    )


def test_the_note_is_quoted_in_the_recorded_command_and_kept_apart():
    import argparse
    import shlex

    from dtdr_agents.cli.core import _speed_provenance

    note = "one core ran a sweep; niced"
    argv = ["speed", "--catalogue-size", "10", "--note", note]
    origin = _speed_provenance(argparse.Namespace(seed=0, note=note, argv=argv))
    assert shlex.split(origin["command"])[-2:] == ["--note", note]
    assert origin["note"] == note and len(origin["load_average_at_start"]) == 3
