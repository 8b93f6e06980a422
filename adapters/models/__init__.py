"""Model routes: which `agents.Model` answers a model turn, and how its failures are classified."""

from adapters.models.routes import ModelRouter, RouteError

__all__ = ["ModelRouter", "RouteError"]
