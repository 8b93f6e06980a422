"""Worker processes, their configuration, and the embedded development stack."""
