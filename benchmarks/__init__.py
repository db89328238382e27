"""torchmark's own benchmark suite: ``python -m benchmarks NAME|all [--quick]``."""
