"""Activity definitions: thin, they call adapters. Grouped by the outside system they touch."""
