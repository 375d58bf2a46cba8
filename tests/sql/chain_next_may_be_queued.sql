-- chain next may be queued
-- In the query that writes its upstream's success: the run is a worker's to drive, the
-- upstream succeeded (the write before it won), nobody waits in the pool, room.
task_instance.dag_run_id = %(run_pk)s::BIGINT AND task_instance.task_id = %(next_task)s::VARCHAR AND (EXISTS (SELECT * 
FROM dag_run 
WHERE dag_run.id = %(run_pk)s::BIGINT AND (dag_run.state || '') = %(param_1)s::VARCHAR AND dag_run.claimed_by_job_id IS NULL AND dag_run.dag_hash = %(dag_hash)s::VARCHAR AND dag_run.span_status != %(span_status_1)s::VARCHAR)) AND (EXISTS (SELECT * 
FROM task_instance AS finished 
WHERE finished.id = %(finished_id)s::BIGINT AND (finished.state || '') = %(param_2)s::VARCHAR)) AND NOT (EXISTS (SELECT * 
FROM task_instance AS waiting, task_instance 
WHERE waiting.state = 'scheduled' AND waiting.pool = task_instance.pool)) AND (SELECT coalesce(sum(active.pool_slots), %(coalesce_2)s::INTEGER) AS coalesce_1 
FROM task_instance AS active, task_instance 
WHERE active.state IN (%(param_3)s::VARCHAR, %(param_4)s::VARCHAR) AND active.pool = task_instance.pool) + task_instance.pool_slots <= (SELECT pool.slots 
FROM pool, task_instance 
WHERE pool.name = task_instance.pool) AND (SELECT count(*) AS count_1 
FROM task_instance AS active, task_instance 
WHERE active.dag_id = task_instance.dag_id AND active.state = %(param_5)s::VARCHAR) + (SELECT count(*) AS count_2 
FROM task_instance AS active, task_instance 
WHERE active.dag_id = task_instance.dag_id AND active.state = %(param_6)s::VARCHAR) < %(r_max_active)s::INTEGER
