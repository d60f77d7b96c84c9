"""The commands of the stages' chains (`costmodel fit`, `costmodel validate`): options, then one call into pipeline/."""
