"""Jobs that drive DagRuns: the scheduler and the backfill share `DagRunJob`."""
