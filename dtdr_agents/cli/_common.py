"""What the command modules share: the error type and argument parsers."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from dtdr_agents.cli._errors import CLIError as CLIError  # re-exported: commands raise it

if TYPE_CHECKING:
    from dtdr_agents.datasets.base import Dataset


BAD_INPUT: tuple[type[BaseException], ...] = (
    ValueError,
    TypeError,
    KeyError,
    OSError,
    MemoryError,
    OverflowError,
    RecursionError,
)
"""Exceptions `main` reports as `error: ...` (exit 2) besides `DTDRError`: bad values and
files reach library code as these."""


def describe_error(exc: BaseException) -> str:
    """A one-line message for a bad-input exception (with the file for OS errors)."""
    if isinstance(exc, OSError) and exc.filename is not None:
        reason = exc.strerror or type(exc).__name__
        return f"{exc.filename}: {reason}"
    if isinstance(exc, KeyError) and exc.args:
        return f"{type(exc).__name__}: {exc.args[0]}"
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, ValueError | TypeError) else f"{type(exc).__name__}: {text}"


def check_encoder_option(spec: str | None, option: str = "--encoder") -> None:
    """Refuse an encoder spec that cannot load here, naming the option; cheap, so run it first.

    None (the option not given) passes: the library default applies.
    """
    from dtdr_agents.foundation.encoders import ENCODER_CHOICES, encoder_problem

    if spec is None:
        return
    problem = encoder_problem(spec)
    if problem is not None:
        raise CLIError(f"{option} {spec!r}: {problem}. Accepted: {ENCODER_CHOICES}")


def _int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer >= `minimum`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected an integer >= {minimum}, got {text!r}"
            ) from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        return value

    return parse


positive_int = _int_at_least(1)
"""An argparse type: an integer >= 1."""
non_negative_int = _int_at_least(0)
"""An argparse type: an integer >= 0."""


def non_empty(text: str) -> str:
    """An argparse type: a string that is not blank."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def parse_value(text: str) -> Any:
    """A `--param` value: JSON when it parses (numbers, booleans, lists), else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_params(pairs: Sequence[str] | None, option: str = "--param") -> dict[str, Any]:
    """`key=value` pairs as a dict (dashes in keys become underscores)."""
    out: dict[str, Any] = {}
    for pair in pairs or ():
        if "=" not in pair:
            raise CLIError(f"{option} expects key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        key = key.strip().replace("-", "_")
        if not key:
            raise CLIError(f"{option} expects key=value, got {pair!r}")
        out[key] = parse_value(value)
    return out


def split_ids(text: str | None, default: Sequence[str]) -> list[str]:
    """A comma-separated id list, or `default` when empty."""
    if not text:
        return list(default)
    ids = [t.strip() for t in text.split(",") if t.strip()]
    if not ids:
        raise CLIError(f"no ids in {text!r}")
    return ids


def add_split_arguments(parser: argparse.ArgumentParser) -> None:
    """The dataset options of the commands that fit on one split and score on another."""
    parser.add_argument(
        "--dataset",
        required=True,
        help="demo, taskbench, sealtools, nestful, rectools, metatool, toolret, tinyagent, jsonl",
    )
    parser.add_argument("--path", help="dataset file or folder")
    parser.add_argument("--tools", help="tools file (jsonl datasets)")
    parser.add_argument("--split", help="published split to load (e.g. glaive for nestful)")
    parser.add_argument("--train-split", help="published split used as demonstrations (e.g. dev)")
    parser.add_argument("--test-split", help="published split used as test (e.g. test_in_domain)")
    parser.add_argument("--limit", type=positive_int, help="use only the first N samples")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-bad", action="store_true", help="skip malformed lines (counted)")


def load_split(args: argparse.Namespace) -> tuple[Dataset, Dataset]:
    """(demonstrations, test) as `add_split_arguments` describes; loader problems are printed."""
    from dtdr_agents.datasets import load_train_test
    from dtdr_agents.datasets.stats import problem_summary

    kwargs: dict[str, Any] = {"skip_bad": args.skip_bad, "limit": args.limit}
    if args.tools:
        kwargs["tools_path"] = args.tools
    if args.split:
        kwargs["split"] = args.split
    from dtdr_agents.cli._flags import flag_words

    with flag_words():  # the loader's errors name its keywords: say the flags
        train, test = load_train_test(
            args.dataset,
            args.path,
            seed=args.seed,
            train_split=args.train_split,
            test_split=args.test_split,
            **kwargs,
        )
    problems = list(dict.fromkeys([*train.problems, *test.problems]))
    if problems:
        print(
            f"loader: {problem_summary(problems)}; `dtdr-agents stats` lists them", file=sys.stderr
        )
    return train, test


def add_plan_subset_arguments(parser: argparse.ArgumentParser, *, first: str) -> None:
    """`first N` (the option named `first`) or `--test-sample N`, mutually exclusive."""
    subset = parser.add_mutually_exclusive_group()
    subset.add_argument(
        first,
        type=positive_int,
        metavar="N",
        help="score only the first N test plans of the split, keeping every demonstration "
        "(--limit cuts the samples before the split)",
    )
    subset.add_argument(
        "--test-sample",
        type=positive_int,
        metavar="N",
        help="score N test plans drawn at random (seeded by --seed, kept in the split's "
        "order), keeping every demonstration: for a published test split ordered by "
        "difficulty, where the first N are not representative",
    )


def plan_subset(
    test: Dataset, *, first: int | None, sample: int | None, seed: int, first_flag: str
) -> Dataset:
    """The test plans `add_plan_subset_arguments` chose: the first N, or a seeded sample."""
    import dataclasses
    import random

    wanted = first if first is not None else sample
    if wanted is None:
        return test
    plans = list(test.demos)
    if wanted > len(plans):
        option = first_flag if first is not None else "--test-sample"
        print(
            f"{option} {wanted}: the test split has only {len(plans)} plans; using them all",
            file=sys.stderr,
        )
    elif first is None:  # seeded, kept in the split's order
        keep = sorted(random.Random(f"test-sample:{seed}").sample(range(len(plans)), wanted))
        plans = [plans[i] for i in keep]
    return dataclasses.replace(test, demos=plans[:wanted])
