"""Agent definitions: ordinary `agents.Agent` objects, named in the catalog the worker serves."""
