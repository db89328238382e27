"""Runs beyond one device: start ranks through torchrun's launcher, or join a job that
torchrun or Slurm already started (env.py), and run planned cases in lockstep on every
rank (rank.py): rank 0 alone stores and prints, the others send it their samples."""
