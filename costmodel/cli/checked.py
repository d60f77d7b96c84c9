"""Click callbacks that check an option as its declared field (costmodel/fields.py) while the
command line is parsed, so every path of a command (plan and plan --load-curve alike) gets the same
one-line refusal before any work."""

from __future__ import annotations

from costmodel.fields import Field


def checked(field: Field):
    """`click.option(..., callback=checked(MAX_REPLICAS))`: None passes (an option left unset)."""

    def callback(ctx, param, value):
        return value if value is None else field.check(value)

    return callback
