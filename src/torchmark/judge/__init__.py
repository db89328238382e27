"""Every verdict torchmark gives, in one room: pure rules over stored results (no torch).

    validity     the judge: can a result be trusted (ok / warn / invalid) and why, in words
    verdicts     what a verdict allows a reader: rank, compare, average, count, recommend
    comparison   FASTER / SLOWER / SAME / UNCLEAR between two results, against their noise
    stragglers   the rank whose step is slower than the others' by more than their spread
    worlds       whether two results ran at different world sizes, and how to say so
    raised       a figure above its measured ceiling: raise the ceiling, or call it invalid
    load         what counts as other processes' load on a result's device

Nothing here imports torch; ``verdicts`` imports neither torch nor numpy, so commands that
only read stored runs use it at no cost.
"""
