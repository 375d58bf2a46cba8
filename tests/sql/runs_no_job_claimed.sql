-- runs no job claimed
-- The runs workers drive; the condition of the workers' queueing by priority.
dag_run.claimed_by_job_id IS NULL
