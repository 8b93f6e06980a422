"""Deterministic workflows only; each module holds one workflow and imports no I/O."""
