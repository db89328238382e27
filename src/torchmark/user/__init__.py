"""The user's own model: load it (spec, source), make its inputs, its CPU/GPU break-even
and its cost per item. Benchmarking it is a kind of run: ``torchmark.kinds.model.kind`` (and
``kinds.tune``)."""
