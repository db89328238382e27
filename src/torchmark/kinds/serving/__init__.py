"""``torchmark serving``: which device serves *my* traffic within *my* latency bound, how
many of them, at what cost.

    kind       ``serve()`` and ``ServingConfig``: the run, its devices and splits, the answer
    arrivals   Poisson arrivals at a rate, drawn before serving (the open loop)
    clock      the host's clock (sleep + spin) or a fake one (tests, simulations)
    server     one instance: the schedule as its queue, the dynamic batcher, the executor
    model      the model as served: a recipe, host requests, the executor (torch)
    fake       a device of known service time (tests, the generator's benchmark)
    fleet      one instance here, or (workers) several processes splitting a CPU's cores
    point      one load point, window by window until its p99 is stable, then judged
    search     the highest rate within the bound, and the batching that reaches it
    generator  the load generator's own limit on this host
    stats      percentiles, the p99's binomial interval, minimum request counts
    answer     the stored documents, the answer per device and the verdict
    oip        the model behind an Open Inference Protocol v2 server (uvicorn, a batcher)
    client     the open loop over HTTP, in its own process
    served     a fleet over an OIP endpoint: torchmark's server ("as served") or yours
    deployed   the two answers: the model's capacity in process and as served

What a serving run stores is ``results.serving``. Nothing here imports torch but ``kind``,
``model``, ``workers``' processes and the OIP server's process.
"""
