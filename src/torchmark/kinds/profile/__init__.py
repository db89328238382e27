"""``torchmark profile``: where a step's time goes.

    kind        ``profile()``: one case measured unprofiled, then profiled, stored as a run
    capture     torch.profiler with a schedule (wait, warm-up, active steps)
    events      the trace's events, read without torch
    categories  pure functions over trace events: the breakdown that sums to the step
    ops         top ops against the measured ceilings, and the plain-words verdict
    names       short, readable op and kernel names
    memory      the allocator's peaks per step
    advice      what to change, from the breakdown

Nothing is imported here: readers (``report.profile``) import ``names`` alone, without torch.
"""
