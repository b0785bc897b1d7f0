"""Printing helpers of the learning-speed tables (learning_speed.py, budget_endpoints.py)."""
from __future__ import annotations


def markdown_table(header: list[str], rows: list[list[str]]) -> None:
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")


def spread(values: list[float], digits: int = 2) -> str:
    """median [min-max]"""
    import numpy as np

    return f"{np.median(values):.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"
