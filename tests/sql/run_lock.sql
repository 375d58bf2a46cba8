-- run lock
-- The first statement of a result that decides its run. `state || ''`: no index covers it,
-- so the row is reached by its key whatever the statistics (a generic plan made on a small
-- table read the index on state). FOR NO KEY UPDATE: a TI's foreign-key check (FOR KEY
-- SHARE) never waits on it.
SELECT dag_run.run_id, dag_run.claimed_by_job_id, dag_run.dag_hash, dag_run.span_status 
FROM dag_run 
WHERE dag_run.id = %(run_pk)s::BIGINT AND (dag_run.state || '') = %(param_1)s::VARCHAR FOR NO KEY UPDATE
