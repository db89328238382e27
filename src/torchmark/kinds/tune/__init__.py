"""``torchmark tune``: the settings that make your model faster, checked and recommended.

    kind        ``tune()`` and ``TuneConfig``: the run around one ``Tuner`` per device
    candidates  what is tried (``Candidate``) and the code that applies the recommendation
    workload    builds each candidate (untimed) and checks its output
    search      ``Tuner``: the interleaved rounds and the staged search on one device
    summary     the ranking and the recommendation, into the record's ``extra``

Nothing is imported here: ``kind`` imports torch.
"""
