"""The `groundwork` command line."""
