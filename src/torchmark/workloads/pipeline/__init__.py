"""The input pipeline: a JPEG dataset on disk, decoded and augmented by a DataLoader, feeding
a training step; each step split into waiting for the batch, copying it, and computing."""
