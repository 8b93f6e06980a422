"""An agent that publishes notes: one governed `write` tool whose effect lands in the target
named "notes" (a git repository, an HTTP service or a directory, by worker configuration)."""

from __future__ import annotations

import hashlib
from typing import Any

from agents import Agent

from contracts.run import ApprovalRule, EffectClass
from definitions.governed import ApprovalBinding, governed_tool


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


def _review_binding(arguments: dict[str, Any]) -> ApprovalBinding:
    content = str(arguments["content"])
    return ApprovalBinding(
        subject=f"note-{arguments['note_id']}",
        revision=str(arguments["revision"]),
        content_hash=hashlib.sha256(content.encode()).hexdigest(),
        preview=content[:2000],
    )


@governed_tool(
    effect_class=EffectClass.IRREVERSIBLE,
    target="notes",
    effect_key=note_effect_key,
    approval=ApprovalRule.ALWAYS,
    approval_binding=_review_binding,
    approver_roles=("editor",),
    domain_event="NotePublished",
    name="publish_reviewed_note",
)
def publish_reviewed_note(note_id: str, revision: int, content: str) -> dict[str, Any]:
    """Publish a revision of a note after an editor approves exactly this content.

    Args:
        note_id: Stable id of the note.
        revision: Revision number of this content.
        content: The full Markdown text.
    """
    return _reviewed_request(note_id, revision, content)


def _reviewed_request(note_id: str, revision: int, content: str) -> dict[str, Any]:
    return {
        "path": f"notes/{note_id}.md",
        "content": content,
        "message": f"Publish {note_id} r{revision} (reviewed)",
    }


@governed_tool(
    effect_class=EffectClass.IRREVERSIBLE,
    target="notes",
    effect_key=note_effect_key,
    approval=ApprovalRule.ALWAYS,
    approval_binding=_review_binding,
    approver_roles=("editor",),
    domain_event="NotePublished",
    approval_ttl_s=3600,
    on_expiry="re_request",
    max_approval_requests=3,
    name="publish_reviewed_note_patiently",
)
def publish_reviewed_note_patiently(note_id: str, revision: int, content: str) -> dict[str, Any]:
    """Like publish_reviewed_note, but an unanswered request is asked again (3 times, 1 h each).

    Args:
        note_id: Stable id of the note.
        revision: Revision number of this content.
        content: The full Markdown text.
    """
    return _reviewed_request(note_id, revision, content)


def build_agent() -> Agent[None]:
    return Agent(
        name="notes-writer",
        instructions="Publish the note the user asks for with publish_note, then confirm.",
        tools=[publish_note, publish_reviewed_note, publish_reviewed_note_patiently],
    )
