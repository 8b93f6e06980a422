"""Search attributes the Web UI lists and filters runs by; registered by `groundwork up`."""

from __future__ import annotations

from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

GW_STATUS = SearchAttributeKey.for_keyword("GwStatus")
GW_AGENT = SearchAttributeKey.for_keyword("GwAgent")
GW_TENANT = SearchAttributeKey.for_keyword("GwTenant")
GW_RELEASE = SearchAttributeKey.for_keyword("GwRelease")
GW_WAITING_REASON = SearchAttributeKey.for_keyword("GwWaitingReason")

ALL_KEYS = (GW_STATUS, GW_AGENT, GW_TENANT, GW_RELEASE, GW_WAITING_REASON)


def dev_server_args() -> list[str]:
    """`temporal server start-dev` flags registering every Groundwork search attribute."""
    args: list[str] = []
    for key in ALL_KEYS:
        args += ["--search-attribute", f"{key.name}=Keyword"]
    return args


def initial_attributes(agent: str, tenant: str, release: str) -> TypedSearchAttributes:
    """Set at start, so a run is listed and filterable before its first workflow task runs."""
    return TypedSearchAttributes(
        [
            SearchAttributePair(GW_STATUS, "Created"),
            SearchAttributePair(GW_AGENT, agent),
            SearchAttributePair(GW_TENANT, tenant),
            SearchAttributePair(GW_RELEASE, release),
            SearchAttributePair(GW_WAITING_REASON, ""),
        ]
    )
