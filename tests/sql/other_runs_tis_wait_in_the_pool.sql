-- other runs' TIs wait in the pool
-- Returned by the write that schedules a run's ready TIs, from the statement's snapshot
-- (before its own write): TIs of other runs wait in the pool, from the partial index
-- ix_task_instance_waiting.
EXISTS (SELECT * 
FROM task_instance AS elsewhere 
WHERE elsewhere.state = 'scheduled' AND elsewhere.pool = %(r_pool)s::VARCHAR AND elsewhere.dag_run_id != %(run_pk)s::BIGINT)
