"""Maintenance tools run from the Makefile (not needed by the lab itself)."""
