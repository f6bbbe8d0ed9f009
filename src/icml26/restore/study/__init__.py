"""Experiment code of the restore claim (not part of the library API)."""
