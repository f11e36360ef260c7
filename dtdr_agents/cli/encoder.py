"""`dtdr-agents export-encoder`: MiniLM as an ONNX folder, so serving needs no torch."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

CHECK_MIN_COSINE = 0.999
"""The least cosine `--check` accepts between the fp32 export's vectors and torch's."""


def _check_texts(n: int) -> list[str]:
    """Up to `n` distinct real texts: the demo dataset's requests, then its tool descriptions."""
    from dtdr_agents.datasets.synthetic import make_demo_dataset

    data = make_demo_dataset(n=max(n, 1), seed=0)
    texts = [t.description for t in data.tools] + [d.query for d in data.demos]
    return list(dict.fromkeys(texts))[:n]


def cmd_export_encoder(args: argparse.Namespace) -> int:
    """Export MiniLM to ONNX (optionally int8); with --check, compare it with torch's."""
    from dtdr_agents.foundation.encoders.onnx import OnnxEncoder, describe_export, export_encoder

    folder = export_encoder(args.out, int8=args.int8)
    info = describe_export(folder)
    print(f"exported {info['id']} ({info['quantization']}, opset {info['opset']}) to {folder}")
    for name, digest in sorted(info["files"].items()):
        print(f"  {name}: {info['sizes'][name]:,} bytes, sha256 {digest}")
    if not args.check:
        return 0
    from dtdr_agents.foundation.encoders import SentenceTransformerEncoder

    texts = _check_texts(args.check)
    cos = np.sum(
        SentenceTransformerEncoder("default").encode(texts) * OnnxEncoder(folder).encode(texts),
        axis=1,
    )
    print(
        f"check on {len(texts)} demo texts against sentence-transformers (torch): cosine min "
        f"{float(cos.min()):.6f}, mean {float(cos.mean()):.6f}"
    )
    if info["quantization"] == "fp32" and float(cos.min()) < CHECK_MIN_COSINE:
        print(f"error: the fp32 export's cosine is below {CHECK_MIN_COSINE}")
        return 1
    return 0


def add_commands(sub: Any) -> None:
    """Register `export-encoder`."""
    export = sub.add_parser(
        "export-encoder",
        help="export the installed MiniLM to ONNX once, so `rank` and the proxies run without "
        "torch (pip install 'dtdr-agents[serve]')",
    )
    export.add_argument(
        "-o",
        "--out",
        help="folder to write (default: the cache's onnx/all-MiniLM-L6-v2-fp32 or -int8, "
        "where the encoder looks; elsewhere, point DTDR_ONNX_ENCODER at it)",
    )
    export.add_argument(
        "--int8",
        action="store_true",
        help="quantise the weights to int8: about a quarter of the size and another encoder "
        "id, so a model fitted in fp32 needs --allow-encoder-change to use it",
    )
    export.add_argument(
        "--check",
        type=int,
        default=0,
        metavar="N",
        help="also embed N demo texts with torch and with the export and print the cosines "
        "(an fp32 export below 0.999 exits 1)",
    )
    export.set_defaults(func=cmd_export_encoder)
