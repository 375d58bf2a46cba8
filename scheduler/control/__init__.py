"""What operators do to runs and task instances, shared by the CLI and the REST API:
clearing, explaining a TI's state, the workers serving the queues, and checking input.
"""
