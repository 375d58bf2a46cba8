"""The `sluice` command line."""
