"""Value objects that are stored, exported and reported (``record``), and the document's
schema version with the steps that upgrade older documents (``schema``)."""

from torchmark.results.record import (
    ABOVE_CEILING_PCT,
    IMPORTED,
    MAX_SAMPLE_S,
    Ceiling,
    CeilingSource,
    Headline,
    Result,
    RunRecord,
    Status,
    Throughput,
    Verdict,
    Work,
    is_host,
    link_ceiling,
    utcnow,
)
from torchmark.results.schema import SCHEMA_VERSION

__all__ = [
    "ABOVE_CEILING_PCT",
    "IMPORTED",
    "MAX_SAMPLE_S",
    "SCHEMA_VERSION",
    "Ceiling",
    "CeilingSource",
    "Headline",
    "Result",
    "RunRecord",
    "Status",
    "Throughput",
    "Verdict",
    "Work",
    "is_host",
    "link_ceiling",
    "utcnow",
]
