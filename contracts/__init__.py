"""Pydantic models and pure functions shared by workflows, activities and clients. No I/O here."""
