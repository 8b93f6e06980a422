"""The editor writes the article from a closed EvidenceSet; the publisher's one governed tool
puts an approved revision into the docs site.

The editor has no tools: everything it may say is in its input, numbered [E1]..[En], and
the research workflow refuses a draft with an uncited claim. `publish_article` is never
offered to a model: the workflow prepares it itself after the approval, so the effect key
and the approval name the same revision and content hash.
"""

from __future__ import annotations

from typing import Any

from agents import Agent

from contracts.research import PUBLISH_TOOL, PUBLISHER_AGENT, article_effect_key, article_hash
from contracts.run import ApprovalRule, EffectClass
from definitions.governed import ApprovalBinding, governed_tool

DOCS_SITE = "docs-site"


def article_path(article_id: str) -> str:
    return f"articles/{article_id}.md"


def _effect_key(arguments: dict[str, Any]) -> str:
    return article_effect_key(
        str(arguments["article_id"]),
        int(arguments["revision"]),
        article_hash(str(arguments["content"])),
        str(arguments.get("destination") or DOCS_SITE),
    )


def _binding(arguments: dict[str, Any]) -> ApprovalBinding:
    content = str(arguments["content"])
    return ApprovalBinding(
        subject=f"article-{arguments['article_id']}",
        revision=str(arguments["revision"]),
        content_hash=article_hash(content),
        preview=content[:6000],
    )


@governed_tool(
    effect_class=EffectClass.IRREVERSIBLE,
    target=DOCS_SITE,
    effect_key=_effect_key,
    approval=ApprovalRule.ALWAYS,
    approval_binding=_binding,
    approver_roles=("editor",),
    domain_event="PublishConfirmed",
    fail_run_on_error=True,
    name=PUBLISH_TOOL,
)
def publish_article(
    article_id: str, revision: int, content: str, destination: str = DOCS_SITE
) -> dict[str, Any]:
    """Publish one approved revision of an article to the docs site.

    Args:
        article_id: Stable id of the article.
        revision: The draft revision that was approved.
        content: The full Markdown, exactly as approved.
        destination: The docs-site target it goes to.
    """
    return {
        "path": article_path(article_id),
        "content": content,
        "message": f"Publish {article_id} r{revision}",
    }


def build_editor() -> Agent[None]:
    return Agent(
        name="editor",
        instructions=(
            "You are an editor. Write a short Markdown article body (no title) answering the "
            "question from the numbered evidence in the task only. Every line that states a "
            "fact ends with the ids of the evidence it rests on, like [E3]. Headings are fine; "
            "uncited claims are refused."
        ),
    )


def build_publisher() -> Agent[None]:
    return Agent(
        name=PUBLISHER_AGENT,
        instructions="Never run as a model loop; holds the governed publish tool.",
        tools=[publish_article],
    )
