"""`ArtefactFlow`: the files a request names feed the tools that take them (no demonstrations)."""

from __future__ import annotations

import numpy as np
import pytest

from dtdr_agents.foundation.types import END_OF_PLAN, Tool, Toolset
from dtdr_agents.retrievers.artefacts import (
    ArtefactFlow,
    kinds_mask,
    media_kind,
    request_media,
    tool_needs,
)
from dtdr_agents.retrievers.base import ToolRetriever
from dtdr_agents.retrievers.hybrid import HybridRetriever


def _tool(name: str, description: str, params: list[str], outputs: tuple[str, ...] = ()) -> Tool:
    schema = {
        "type": "object",
        "properties": {p: {"type": "string"} for p in params},
        "required": list(params),
    }
    return Tool(name, description, schema, outputs)


@pytest.fixture
def media_tools() -> Toolset:
    return Toolset(
        [
            _tool("transcribe", "Convert spoken words into written words", ["audio"], ("text",)),
            _tool("summarize", "Summarize a long text into a short summary", ["text"], ("text",)),
            _tool("caption", "Describe what a picture shows in words", ["image"], ("text",)),
            _tool("draw", "Draw a picture from a description", ["text"], ("image",)),
        ]
    )


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("image", "image"),
        ("image_2", "image"),
        ("audio_file", "audio"),
        ("videoUrl", "video"),
        ("image_path", "image"),
        ("image_type", None),
        ("image_height", None),
        ("video_id", None),
        ("imagery", None),
        ("text", None),
        ("source_image_path", None),
    ],
)
def test_media_kind_is_the_kind_alone_or_with_a_handle_word(name, kind):
    assert media_kind(name) == kind


def test_request_media_reads_file_extensions_only():
    assert request_media("I have 'example.JPG' and a recording lecture.wav") == kinds_mask(
        ["image", "audio"]
    )
    assert request_media("https://example.org/clip.mp4?raw=1") == kinds_mask(["video"])
    # a picture talked about, a version number, an extension inside a word: no file
    assert request_media("Draw an image of a cat, version 1.2, from the .jpgs folder") == 0


def test_required_parameters_decide_the_needs():
    optional = Tool(
        "thumb",
        "Make a thumbnail",
        {
            "type": "object",
            "properties": {"image": {"type": "string"}, "audio": {"type": "string"}},
            "required": ["image"],
        },
    )
    assert tool_needs(optional) == kinds_mask(["image"])
    listed = Tool("mix", "Mix", {"type": "object", "properties": {"audio": {}, "audio_2": {}}})
    assert tool_needs(listed) == kinds_mask(["audio"])  # no "required": every listed one


def test_flow_takes_the_given_file_and_blocks_what_nothing_gives(media_tools):
    flow = ArtefactFlow(media_tools)
    assert flow
    names = media_tools.names
    needs = flow.needs(names)

    def scores(query: str, history: tuple[str, ...]) -> dict[str, float]:
        state = flow.state(request_media(query), history)
        return dict(zip(names, flow.flow(needs, *state).tolist(), strict=True))

    # an audio file given: its consumer +1; the picture tool needs what nothing gives: -1
    assert scores("Summarize talk.mp3", ()) == {
        "transcribe": 1.0,
        "summarize": 0.0,
        "caption": -1.0,
        "draw": 0.0,
    }
    # once transcribed, the file is taken (0, not +1: it can still run)
    assert scores("Summarize talk.mp3", ("transcribe",))["transcribe"] == 0.0
    # no file: the picture tool can run only after a call gives a picture
    assert scores("Draw a cat and describe it", ())["caption"] == -1.0
    assert scores("Draw a cat and describe it", ("draw",))["caption"] == 0.0
    # a name outside the catalogue needs and gives nothing
    assert flow.needs(["nowhere"]).tolist() == [0]
    assert not ArtefactFlow([Tool("lookup", "Find a city's weather")])


def test_the_hybrid_starts_with_the_tool_that_takes_the_request_file(encoder, media_tools):
    """Zero demonstrations: a question about an audio file starts with its transcription, a
    tool that needs a picture nothing gives pays for it, and so does the transcription when
    no file is named (`artefact_flow` in `why`)."""
    query = "What does the speaker say in talk.wav?"
    zero = HybridRetriever(encoder=encoder).fit([], media_tools)
    first = zero.rank(query, ())
    assert first.top(1)[0].name == "transcribe"
    assert "artefact_flow=+2.00" in first.why("transcribe")
    assert "artefact_flow=-2.00" in first.why("caption")
    after = zero.rank(query, ("transcribe",))
    assert "artefact_flow" not in after.why("transcribe")  # the file is taken
    plain = zero.rank("What does the speaker say?", ())
    assert "artefact_flow=-2.00" in plain.why("transcribe")
    assert plain.probability("transcribe") < first.probability("transcribe")
    assert first.probability(END_OF_PLAN) == pytest.approx(plain.probability(END_OF_PLAN))


def test_a_tool_added_after_fit_gets_the_flow_in_its_prior(encoder, media_tools):
    """An added tool that takes the request's file gets twice the query-similarity prior,
    one that needs a kind nothing gives gets half: a ratio of 4 between the two."""
    model = HybridRetriever(encoder=encoder).fit([], media_tools)
    added = [
        _tool("denoise", "Clean up a recording", ["audio"], ("audio",)),
        _tool("sharpen", "Clean up a photo", ["image"], ("image",)),
    ]
    model.set_tools([*media_tools, *added])
    query = "Clean up the recording talk.wav"
    prior = model._new_tool_prior(query, ())
    base = ToolRetriever._new_tool_prior(model, query, ())
    i, j = (model._names.index(n) for n in ("denoise", "sharpen"))
    np.testing.assert_allclose(prior[i] / prior[j], 4.0 * base[i] / base[j])
