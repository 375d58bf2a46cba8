"""Sluice control plane: models, states, DagRun logic, jobs and the CLI."""
