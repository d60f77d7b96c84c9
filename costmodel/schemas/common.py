"""The records every artefact schema shares (Provenance, Distribution), for the schema modules and
their readers; they live in costmodel/records.py, below costmodel/modes, whose profile parts are made
of them."""

from costmodel.records import PROVENANCE_KINDS, Distribution, Provenance

__all__ = ["PROVENANCE_KINDS", "Distribution", "Provenance"]
