"""Integrations with application frameworks (each imports its framework only when used)."""
