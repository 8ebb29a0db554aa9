"""The pure core: what a run should look like next, from what was observed. No I/O here."""
