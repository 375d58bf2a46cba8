-- next waiting TI fits its pool
-- The first TI waiting in the pool (priority, then age; SKIP LOCKED) from the partial
-- index ix_task_instance_waiting: its state written inline ('scheduled'), the only way a
-- prepared statement's plan can use the index's condition. The pool's slots read in the
-- statement (sent after its lock).
task_instance.id = (SELECT waiting.id 
FROM task_instance AS waiting JOIN dag_run ON dag_run.id = waiting.dag_run_id 
WHERE waiting.state = 'scheduled' AND waiting.pool = %(r_pool)s::VARCHAR AND dag_run.state = %(state_1)s::VARCHAR AND dag_run.claimed_by_job_id IS NULL ORDER BY waiting.priority_weight DESC, waiting.scheduled_at, waiting.id 
 LIMIT %(param_1)s::INTEGER FOR UPDATE OF waiting SKIP LOCKED) AND (SELECT coalesce(sum(active.pool_slots), %(coalesce_2)s::INTEGER) AS coalesce_1 
FROM task_instance AS active, task_instance 
WHERE active.state IN (%(param_2)s::VARCHAR, %(param_3)s::VARCHAR) AND active.pool = task_instance.pool) + task_instance.pool_slots <= (SELECT pool.slots 
FROM pool 
WHERE pool.name = %(r_pool)s::VARCHAR) AND (SELECT count(*) AS count_1 
FROM task_instance AS active, task_instance 
WHERE active.dag_id = task_instance.dag_id AND active.state = %(param_4)s::VARCHAR) + (SELECT count(*) AS count_2 
FROM task_instance AS active, task_instance 
WHERE active.dag_id = task_instance.dag_id AND active.state = %(param_5)s::VARCHAR) < (SELECT dag.max_active_tasks 
FROM dag, task_instance 
WHERE dag.dag_id = task_instance.dag_id)
