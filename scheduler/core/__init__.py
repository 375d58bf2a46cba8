"""The shared core: settings, states and their moves, models, database access, the one
compare-and-set module, queries, the message contract and span ids.

Both sides import it (the scheduler's jobs and the worker's runtime); it imports nothing
of Sluice's but `sluice.tasks` (the authoring API).
"""
