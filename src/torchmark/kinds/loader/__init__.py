"""``torchmark model SPEC --loader``: your model fed by your DataLoader.

    kind        ``benchmark_loader``: the run through the one case loop
    workload    ``UserPipeline``: the input breakdown per DataLoader setting

Nothing is imported here: both import torch.
"""
