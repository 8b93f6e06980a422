"""GitHub webhooks -> AgentInput: pull_request, pull_request_review, issue_comment.

The delivery id (X-GitHub-Delivery) is the source_event_id, so GitHub's redeliveries are
duplicates; the subject names the repository and the PR or issue number.
"""

from __future__ import annotations

from typing import Any

from contracts.inputs import AgentInput, InputKind

SUPPORTED = ("pull_request", "pull_request_review", "issue_comment")


class UnsupportedEvent(ValueError):
    pass


def normalize(event: str, delivery_id: str, payload: dict[str, Any]) -> AgentInput:
    if event not in SUPPORTED:
        raise UnsupportedEvent(
            f"GitHub event {event!r} is not handled (handled: {', '.join(SUPPORTED)})"
        )
    repo = str((payload.get("repository") or {}).get("full_name") or "unknown/unknown")
    action = str(payload.get("action") or "unknown")
    if event == "issue_comment":
        issue = payload.get("issue") or {}
        number = issue.get("number")
        kind = "pr" if issue.get("pull_request") else "issue"
        comment = payload.get("comment") or {}
        data = {
            "action": action, "number": number, "body": comment.get("body"),
            "author": (comment.get("user") or {}).get("login"), "url": comment.get("html_url"),
        }  # fmt: skip
        subject = f"{repo}#{kind}-{number}"
    else:
        pr = payload.get("pull_request") or {}
        number = pr.get("number")
        data = {
            "action": action, "number": number, "title": pr.get("title"),
            "head_sha": (pr.get("head") or {}).get("sha"), "author": (pr.get("user") or {}).get("login"),
            "url": pr.get("html_url"),
        }  # fmt: skip
        if event == "pull_request_review":
            review = payload.get("review") or {}
            data |= {
                "review_state": review.get("state"),
                "reviewer": (review.get("user") or {}).get("login"),
            }
        subject = f"{repo}#pr-{number}"
    return AgentInput(
        source_event_id=delivery_id,
        kind=InputKind.EVENT,
        type=f"github.{event}.{action}",
        source="github",
        subject=subject,
        data=data,
    )
