"""An agent that publishes notes: one governed `write` tool whose effect lands in the target
named "notes" (a git repository, an HTTP service or a directory, by worker configuration)."""

from __future__ import annotations

import hashlib
from typing import Any

from agents import Agent

from contracts.run import EffectClass
from definitions.governed import governed_tool


def note_effect_key(arguments: dict[str, Any]) -> str:
    """Business identity: which note, which revision, exactly which content, where."""
    digest = hashlib.sha256(str(arguments["content"]).encode()).hexdigest()[:16]
    return f"note-{arguments['note_id']}:r{arguments['revision']}:{digest}:notes"


@governed_tool(
    effect_class=EffectClass.WRITE,
    target="notes",
    effect_key=note_effect_key,
    domain_event="NotePublished",
)
def publish_note(note_id: str, revision: int, content: str, title: str = "") -> dict[str, Any]:
    """Publish a revision of a note.

    Args:
        note_id: Stable id of the note, e.g. "release-notes".
        revision: Revision number of this content.
        content: The full Markdown text.
        title: Optional commit title; not part of the effect's identity.
    """
    return {
        "path": f"notes/{note_id}.md",
        "content": content,
        "message": title or f"Publish {note_id} r{revision}",
    }


def build_agent() -> Agent[None]:
    return Agent(
        name="notes-writer",
        instructions="Publish the note the user asks for with publish_note, then confirm.",
        tools=[publish_note],
    )
