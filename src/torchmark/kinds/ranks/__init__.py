"""One rank of a distributed run, and the ladder of runs that measures scaling.

    kind      a rank's run: the same plan and case loop, on a session that gathers samples
    rank      lockstep timing, the handshake, and the merge of every rank's samples
    ladder    ``--scaling``: no DDP, then DDP x1, x2 ... through the launcher, each a run
    comm      DDP's communication figure checked against its buckets all-reduced alone
    buckets   the all-reduce of DDP's buckets, timed on the idle process group

Nothing is imported here: readers (``report.scaling``) import ``comm`` alone, without torch.
"""
