"""One module per kind of run (model, loader, tune, soak, profile, ranks, serving): its
frozen config, its session through ``run.open_run``, and its own loop only where it needs
one.

Nothing is imported here: each kind imports torch, and a command loads only its own.
"""
