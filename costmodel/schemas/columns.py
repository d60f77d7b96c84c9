"""Column documentation carried by the typed records themselves: a record field's metadata holds
its meaning, unit and source, so the CSV data dictionary, the HTML and the docs tables are all
generated from the one definition (costmodel/schemas/dictionary.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class ColumnDoc:
    column: str
    meaning: str
    unit: str
    source: str


def meta(meaning: str, unit: str = "-", source: str = "") -> dict:
    """Field metadata for `dataclasses.field(metadata=meta(...))`."""
    return {"meaning": meaning, "unit": unit, "source": source}


def docs_of(record_type, default_source: str) -> dict[str, ColumnDoc]:
    """name -> ColumnDoc for every documented field of a dataclass."""
    out = {}
    for f in dataclasses.fields(record_type):
        m = f.metadata
        if "meaning" in m:
            out[f.name] = ColumnDoc(f.name, m["meaning"], m["unit"], m["source"] or default_source)
    return out
