"""The GPU tier over the A/B core: its device edge (`device`) and entry points."""
