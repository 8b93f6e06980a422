"""Resolve a model route (`scripted:`, `openai:`, `openai-compatible:`) to an `agents.Model`."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from agents import Model, OpenAIChatCompletionsModel, OpenAIResponsesModel
from openai import AsyncOpenAI

from adapters.models.scripted import ScriptedModel, load_script


class RouteError(ValueError):
    """A route that cannot be resolved: unknown kind, missing script, missing API key."""


@dataclass(frozen=True)
class ModelRouterConfig:
    """Everything a router needs, read from the environment by the entry point only."""

    openai_api_key: str | None = None
    openai_base_url: str | None = None
    """Overrides the OpenAI endpoint for `openai:` routes (a proxy, or a local fake in tests)."""
    compatible_api_key: str | None = None
    """Key sent to `openai-compatible:` servers. Never the OpenAI key: the route (and so the
    URL) comes from the run request, and a request must not be able to exfiltrate the key."""
    scripts_dir: Path | None = None
    """Where `scripted:<name>` looks before the built-in scripts."""
    scripted_call_log: Path | None = None
    """Append one JSON line per scripted model call (tests count turns with it)."""
    request_timeout_s: float = 120.0


class ModelRouter:
    """Caches one Model per route; clients are built with their own retries off (Temporal retries)."""

    def __init__(self, config: ModelRouterConfig) -> None:
        self._config = config
        self._models: dict[str, Model] = {}
        self._clients: dict[tuple[str | None, str | None], AsyncOpenAI] = {}

    def get(self, route: str) -> Model:
        model = self._models.get(route)
        if model is None:
            model = self._build(route)
            self._models[route] = model
        return model

    def _build(self, route: str) -> Model:
        kind, _, rest = route.partition(":")
        if kind == "scripted":
            path = self._script_path(rest)
            return ScriptedModel(
                load_script(path), name=rest, call_log=self._config.scripted_call_log
            )
        if kind == "openai":
            if not rest:
                raise RouteError("openai route needs a model name: openai:<model>")
            key = self._config.openai_api_key
            if not key:
                raise RouteError(f"route {route} needs OPENAI_API_KEY in the worker's environment")
            client = self._client(self._config.openai_base_url, key)
            return OpenAIResponsesModel(model=rest, openai_client=client)
        if kind == "openai-compatible":
            base_url, model_name = _split_compatible(rest)
            client = self._client(base_url, self._config.compatible_api_key or "not-needed")
            return OpenAIChatCompletionsModel(model=model_name, openai_client=client)
        raise RouteError(f"unknown model route kind {kind!r} in {route!r}")

    def _client(self, base_url: str | None, api_key: str) -> AsyncOpenAI:
        key = (base_url, api_key)
        client = self._clients.get(key)
        if client is None:
            client = AsyncOpenAI(
                api_key=api_key,
                base_url=base_url,
                max_retries=0,
                timeout=self._config.request_timeout_s,
            )
            self._clients[key] = client
        return client

    def _script_path(self, name: str) -> Path:
        if not name:
            raise RouteError("scripted route needs a script: scripted:<file or built-in name>")
        candidates = [Path(name)]
        if self._config.scripts_dir is not None:
            candidates.append(self._config.scripts_dir / name)
            candidates.append(self._config.scripts_dir / f"{name}.json")
        builtin = resources.files("definitions.scripts")
        for candidate in candidates:
            if candidate.is_file():
                return candidate
        for filename in (name, f"{name}.json"):
            entry = builtin / filename
            if entry.is_file():
                return Path(str(entry))
        raise RouteError(f"script {name!r} not found (a file path, or a built-in script name)")


def _split_compatible(rest: str) -> tuple[str, str]:
    """`<base-url>|<model>`, or `<base-url>:<model>` as DESIGN.md writes it."""
    if "|" in rest:
        base_url, _, model_name = rest.partition("|")
    else:
        base_url, _, model_name = rest.rpartition(":")
    if not base_url.startswith(("http://", "https://")) or not model_name:
        raise RouteError(
            f"openai-compatible route must be openai-compatible:<base-url>|<model>, got {rest!r}"
        )
    return base_url, model_name
