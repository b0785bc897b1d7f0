"""What a benchmark row says in place of a time when its implementation raised."""
from __future__ import annotations


def failure_reason(err: Exception) -> str:
    """The exception's type and first line (InductorError's message starts with the error it wraps)."""
    first = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
    reason = f"{type(err).__name__}: {first}" if first else type(err).__name__
    return reason if len(reason) <= 120 else reason[:117] + "..."
