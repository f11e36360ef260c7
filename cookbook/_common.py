"""Shared pieces of the cookbook scripts: flags, the chat model, demo data and printing.

Every script runs offline by default: the tools are the 21 assistant tools of the embedded
demo data (their functions return a canned result) and the chat model is a scripted model
that follows each request's recorded plan. ``--model provider:name`` uses a real model through
``langchain.chat_models.init_chat_model``; ``--base-url URL`` uses any OpenAI-compatible server
(vLLM, llama.cpp, Ollama, ...) through ``langchain_openai.ChatOpenAI``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel

from dtdr_agents.foundation.types import Toolset
from dtdr_agents.runtime.prompting import MASK_MODES
from langchain_dtdr.testing import DemoSetup, PlanFollower, ScriptedChatModel, demo_setup


def base_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--model",
        help="a real chat model, 'provider:name' (e.g. openai:gpt-4o-mini) for init_chat_model, "
        "or the served model name with --base-url. Default: an offline scripted model",
    )
    parser.add_argument(
        "--base-url", help="an OpenAI-compatible endpoint, e.g. http://localhost:8000/v1"
    )
    parser.add_argument(
        "--api-key", help="API key for --base-url (default: $OPENAI_API_KEY or 'not-needed')"
    )
    parser.add_argument(
        "--encoder",
        default="default",
        help="'default' (all-MiniLM-L6-v2, offline, ~6 s to load) or 'tfidf' (no model, faster)",
    )
    parser.add_argument("--n-demos", type=int, default=300, help="demonstrations to fit on")
    parser.add_argument("--queries", type=int, default=2, help="held-out requests to run")
    parser.add_argument("-k", "--k", type=int, default=3, help="tools bound per step")
    parser.add_argument("--mode", default="hard", choices=MASK_MODES, help="how tools are given")
    parser.add_argument("--seed", type=int, default=0)
    return parser


def load_demo(args: argparse.Namespace, retriever: str = "dtdr-c") -> DemoSetup:
    """The demo data split and a retriever fitted on it (cached per process)."""
    return demo_setup(retriever, n_train=args.n_demos, seed=args.seed, encoder=args.encoder)


def make_chat_model(
    args: argparse.Namespace, plans: Mapping[str, Sequence[str]], tools: Toolset
) -> BaseChatModel:
    """The chat model the flags ask for (offline: a scripted plan follower)."""
    if args.base_url:
        from langchain_openai import ChatOpenAI

        return ChatOpenAI(
            model=args.model or "default",
            base_url=args.base_url,
            api_key=args.api_key or os.environ.get("OPENAI_API_KEY") or "not-needed",
            temperature=0,
        )
    if args.model:
        from langchain.chat_models import init_chat_model

        return init_chat_model(args.model, temperature=0)
    return ScriptedChatModel(responder=PlanFollower(plans, tools))


def describe_model(model: BaseChatModel) -> str:
    if isinstance(model, ScriptedChatModel):
        return "offline scripted model (follows each request's recorded plan)"
    return f"{type(model).__name__}"


def print_selection(record: Mapping[str, Any], indent: str = "  ") -> None:
    """One line per selection record: history -> bound tools (with probabilities)."""
    probs = record.get("probabilities") or {}
    shown = ", ".join(f"{n} ({probs[n]:.2f})" if n in probs else n for n in record.get("bound", []))
    if record.get("mode", "hard").startswith("soft"):
        preferred = ", ".join(f"{n} ({probs.get(n, 0):.2f})" for n in record.get("selected", []))
        shown = f"all {len(record.get('bound', []))} tools; preferred: {preferred}"
    history = " -> ".join(record.get("history") or []) or "(none)"
    tag = " [widened: " + str(record.get("widen_reason")) + "]" if record.get("widened") else ""
    fallback = " [fallback: every tool]" if record.get("fallback") else ""
    tokens = record.get("tokens") or {}
    print(f"{indent}step {record.get('step')}: after {history}")
    end = record.get("end_probability")
    end_note = f"; end-of-plan {end:.2f}" if isinstance(end, float) else ""
    print(f"{indent}  bound: {shown}{tag}{fallback}{end_note}")
    if tokens:
        print(
            f"{indent}  prompt: {tokens.get('bound_tools')} tool-schema tokens of "
            f"{tokens.get('all_tools')} ({tokens.get('counter')})"
        )


def print_reply(message: Any, indent: str = "  ") -> None:
    calls = getattr(message, "tool_calls", None) or []
    if calls:
        print(f"{indent}  model calls: {', '.join(c['name'] for c in calls)}")
    else:
        print(f"{indent}  model answers: {str(message.content)[:200]}")
