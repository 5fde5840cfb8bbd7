"""Streamed artifacts: each chunk is sent as it comes, and the closing update holds the whole
artifact in exactly the parts the task store keeps."""

from __future__ import annotations

from a2a.types.a2a_pb2 import Artifact, Part
from hypothesis import given
from hypothesis import strategies as st

from a2a_acp_bridge.a2a.artifacts import StreamedArtifact, TaskArtifacts, report_metadata
from a2a_acp_bridge.a2a.store import MERGE_LIMIT, fold_last_text_part, is_plain_text

TEXT = st.text(alphabet="ab\n", min_size=1, max_size=MERGE_LIMIT // 2).map(lambda t: Part(text=t))
FILE = st.builds(
    lambda name: Part(url=f"https://example.com/{name}", filename=name),
    st.sampled_from(["a.txt", "b.png"]),
)
DIFF = st.builds(
    lambda t: Part(text=t, media_type="text/x-diff", filename="x"), st.text(max_size=9)
)
CHUNKS = st.lists(st.lists(st.one_of(TEXT, TEXT, TEXT, FILE, DIFF), min_size=1, max_size=3))


def stored(chunks: list[list[Part]]) -> Artifact:
    """The artifact as the SDK and the task store build it from the chunks."""
    artifact = Artifact(artifact_id="answer")
    for chunk in chunks:
        artifact.parts.extend(chunk)
        fold_last_text_part(artifact)
    return artifact


@given(CHUNKS)
def test_the_closing_update_holds_the_store_s_parts(chunks: list[list[Part]]) -> None:
    streamed = StreamedArtifact("answer")
    # The answer's text comes as a string (text_chunk), files and diffs as parts (chunk).
    events = [
        streamed.text_chunk("t", "c", chunk[0].text)
        if len(chunk) == 1 and is_plain_text(chunk[0])
        else streamed.chunk("t", "c", chunk)
        for chunk in chunks
    ]
    if not chunks:
        assert not streamed.open
        return
    closing = streamed.close("t", "c")
    assert list(closing.artifact.parts) == list(stored(chunks).parts)
    assert closing.last_chunk
    assert not closing.append
    assert closing.artifact.name == "answer"
    # Every chunk went out as it came: the first creates the artifact, the rest append.
    assert [e.append for e in events] == [False] + [True] * (len(events) - 1)
    assert [list(e.artifact.parts) for e in events] == chunks


def test_an_artifact_is_closed_again_whole_after_more_chunks() -> None:
    artifacts = TaskArtifacts()
    answer = artifacts.get("answer")
    answer.text_chunk("t", "c", "before the question ")
    (first,) = artifacts.closing("t", "c")
    assert artifacts.closing("t", "c") == []  # nothing new: nothing to close
    more = answer.text_chunk("t", "c", "after it")
    (second,) = artifacts.closing("t", "c")
    assert more.append
    assert [p.text for p in first.artifact.parts] == ["before the question "]
    assert [p.text for p in second.artifact.parts] == ["before the question after it"]


def test_only_artifacts_that_got_chunks_are_closed() -> None:
    artifacts = TaskArtifacts()
    artifacts.get("answer")  # named, never sent
    artifacts.get("changes").chunk("t", "c", [Part(text="d", media_type="text/x-diff")])
    assert [e.artifact.artifact_id for e in artifacts.closing("t", "c")] == ["changes"]


def test_the_report_goes_under_its_key() -> None:
    assert report_metadata({"stopReason": "end_turn"}) == {"report": {"stopReason": "end_turn"}}
