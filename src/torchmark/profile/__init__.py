"""Where a step's time goes: ``categories`` (pure functions over trace events), ``capture``
(torch.profiler with a schedule), ``ops`` (top ops against the ceilings), ``run`` (the
``profile`` run kind on the shared Session)."""
