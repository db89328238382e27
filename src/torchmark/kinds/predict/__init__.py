"""``torchmark predict``: your model on hardware you don't have, predicted from its op
profile here and a measured run of the target machine (``kind``), checked against real runs.

The pure parts import no torch: the work of a step (``work``), a machine as one run teaches
it (``machine``), the terms and their combination (``terms``), the leave-one-out of the
reference runs (``loo``). Nothing is imported here: ``kind`` and ``profile`` import torch,
and ``show`` reads a stored prediction without it.
"""
