-- queue a decided TI where join next may be queued: others returning picked TI's message
UPDATE task_instance SET state=%(state)s::VARCHAR, try_number=(task_instance.try_number + %(try_number_1)s::INTEGER), attempt_id=%(b_attempt)s::VARCHAR, hostname=%(hostname)s::VARCHAR, pid=%(pid)s::INTEGER, scheduled_at=%(b_now)s::TIMESTAMP WITH TIME ZONE, queued_at=%(b_now)s::TIMESTAMP WITH TIME ZONE, queued_by_job_id=%(b_job)s::BIGINT WHERE (task_instance.state || '') = %(param_1)s::VARCHAR AND task_instance.dag_run_id = %(run_pk)s::BIGINT AND task_instance.task_id = %(next_task)s::VARCHAR AND (EXISTS (SELECT * 
FROM dag_run 
WHERE dag_run.id = %(run_pk)s::BIGINT AND (dag_run.state || '') = %(param_2)s::VARCHAR AND dag_run.claimed_by_job_id IS NULL AND dag_run.dag_hash = %(dag_hash)s::VARCHAR AND dag_run.span_status != %(span_status_1)s::VARCHAR)) AND (EXISTS (SELECT * 
FROM task_instance AS finished 
WHERE finished.id = %(finished_id)s::BIGINT AND (finished.state || '') = %(param_3)s::VARCHAR)) AND NOT (EXISTS (SELECT * 
FROM task_instance AS waiting 
WHERE waiting.state = 'scheduled' AND waiting.pool = task_instance.pool)) AND (SELECT coalesce(sum(active.pool_slots), %(coalesce_2)s::INTEGER) AS coalesce_1 
FROM task_instance AS active 
WHERE active.state IN (%(param_4)s::VARCHAR, %(param_5)s::VARCHAR) AND active.pool = task_instance.pool) + task_instance.pool_slots <= (SELECT pool.slots 
FROM pool 
WHERE pool.name = task_instance.pool) AND (SELECT count(*) AS count_1 
FROM task_instance AS active 
WHERE active.dag_id = task_instance.dag_id AND active.state = %(param_6)s::VARCHAR) + (SELECT count(*) AS count_2 
FROM task_instance AS active 
WHERE active.dag_id = task_instance.dag_id AND active.state = %(param_7)s::VARCHAR) < %(r_max_active)s::INTEGER AND NOT (EXISTS (SELECT * 
FROM task_instance AS up 
WHERE up.dag_run_id = %(run_pk)s::BIGINT AND up.task_id IN (__[POSTCOMPILE_fan_in]) AND up.state != %(state_1)s::VARCHAR)) RETURNING task_instance.id, task_instance.dag_id, task_instance.run_id, task_instance.task_id, task_instance.try_number - %(try_number_2)s::INTEGER AS try_number, task_instance.queue, task_instance.context_carrier
