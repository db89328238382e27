"""``torchmark model``: your model over a batch sweep on every device (``kind``), with its
break-even and cost per item from ``user``. Nothing is imported here: ``kind`` imports
torch."""
