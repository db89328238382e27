"""One module per kind of run: its frozen config, its session, its own loop only where it
needs one (each module's docstring says why)."""
