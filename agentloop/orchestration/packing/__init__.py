"""Packing by default: which branches share one task (``rule.py``) and the watch on a pack's event
loop that names a branch blocking it (``lag.py``). ``docs/how-to/packing.md`` states the rule."""
