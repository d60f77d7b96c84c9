"""Cost arithmetic, capacity planning and exports (finance CSV + data dictionary, HTML charts)."""
