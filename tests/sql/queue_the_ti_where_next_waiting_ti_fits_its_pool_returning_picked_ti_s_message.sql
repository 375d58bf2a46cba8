-- queue the TI where next waiting TI fits its pool returning picked TI's message
UPDATE task_instance SET state=%(state)s::VARCHAR, try_number=(task_instance.try_number + %(try_number_1)s::INTEGER), attempt_id=%(b_attempt)s::VARCHAR, hostname=%(hostname)s::VARCHAR, pid=%(pid)s::INTEGER, queued_at=%(b_now)s::TIMESTAMP WITH TIME ZONE, queued_by_job_id=%(b_job)s::BIGINT WHERE (task_instance.state || '') = %(param_1)s::VARCHAR AND task_instance.id = (SELECT waiting.id 
FROM task_instance AS waiting JOIN dag_run ON dag_run.id = waiting.dag_run_id 
WHERE waiting.state = 'scheduled' AND waiting.pool = %(r_pool)s::VARCHAR AND dag_run.state = %(state_1)s::VARCHAR AND dag_run.claimed_by_job_id IS NULL ORDER BY waiting.priority_weight DESC, waiting.scheduled_at, waiting.id 
 LIMIT %(param_2)s::INTEGER FOR UPDATE OF waiting SKIP LOCKED) AND (SELECT coalesce(sum(active.pool_slots), %(coalesce_2)s::INTEGER) AS coalesce_1 
FROM task_instance AS active 
WHERE active.state IN (%(param_3)s::VARCHAR, %(param_4)s::VARCHAR) AND active.pool = task_instance.pool) + task_instance.pool_slots <= (SELECT pool.slots 
FROM pool 
WHERE pool.name = %(r_pool)s::VARCHAR) AND (SELECT count(*) AS count_1 
FROM task_instance AS active 
WHERE active.dag_id = task_instance.dag_id AND active.state = %(param_5)s::VARCHAR) + (SELECT count(*) AS count_2 
FROM task_instance AS active 
WHERE active.dag_id = task_instance.dag_id AND active.state = %(param_6)s::VARCHAR) < (SELECT dag.max_active_tasks 
FROM dag 
WHERE dag.dag_id = task_instance.dag_id) RETURNING task_instance.id, task_instance.dag_id, task_instance.run_id, task_instance.task_id, task_instance.try_number - %(try_number_2)s::INTEGER AS try_number, task_instance.queue, task_instance.context_carrier
