"""Alembic migration chain of the Sluice schema."""
