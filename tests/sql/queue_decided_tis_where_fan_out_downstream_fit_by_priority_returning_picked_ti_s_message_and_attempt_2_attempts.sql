-- queue decided TIs where fan-out downstream fit, by priority returning picked TI's message and attempt (2 attempts)
UPDATE task_instance SET state=%(state)s::VARCHAR, try_number=(task_instance.try_number + %(try_number_1)s::INTEGER), attempt_id=CASE ready.rank WHEN %(param_1)s::INTEGER THEN %(b_attempt_1)s WHEN %(param_2)s::INTEGER THEN %(b_attempt_2)s END, hostname=%(hostname)s::VARCHAR, pid=%(pid)s::INTEGER, scheduled_at=%(b_now)s::TIMESTAMP WITH TIME ZONE, queued_at=%(b_now)s::TIMESTAMP WITH TIME ZONE, queued_by_job_id=%(b_job)s::BIGINT FROM (SELECT ranked.id AS id, sum(ranked.pool_slots) OVER (ORDER BY ranked.priority_weight DESC, ranked.id) AS slots, row_number() OVER (ORDER BY ranked.priority_weight DESC, ranked.id) AS rank 
FROM task_instance AS ranked 
WHERE ranked.dag_run_id = %(run_pk)s::BIGINT AND ranked.task_id IN (__[POSTCOMPILE_downstream]) AND ranked.state = %(state_1)s::VARCHAR) AS ready WHERE (task_instance.state || '') = %(param_3)s::VARCHAR AND task_instance.id = ready.id AND ready.slots <= (SELECT pool.slots 
FROM pool 
WHERE pool.name = %(r_pool)s::VARCHAR) - (SELECT coalesce(sum(active.pool_slots), %(coalesce_2)s::INTEGER) AS coalesce_1 
FROM task_instance AS active 
WHERE active.state IN (%(param_4)s::VARCHAR, %(param_5)s::VARCHAR) AND active.pool = %(r_pool)s::VARCHAR) AND ready.rank <= %(r_max_active)s - ((SELECT count(*) AS count_1 
FROM task_instance AS active 
WHERE active.dag_id = %(r_dag)s::VARCHAR AND active.state = %(param_6)s::VARCHAR) + (SELECT count(*) AS count_2 
FROM task_instance AS active 
WHERE active.dag_id = %(r_dag)s::VARCHAR AND active.state = %(param_7)s::VARCHAR)) AND NOT (EXISTS (SELECT * 
FROM task_instance AS in_line 
WHERE in_line.state = 'scheduled' AND in_line.pool = %(r_pool)s::VARCHAR)) AND (EXISTS (SELECT * 
FROM dag_run 
WHERE dag_run.id = %(run_pk)s::BIGINT AND (dag_run.state || '') = %(param_8)s::VARCHAR AND dag_run.claimed_by_job_id IS NULL AND dag_run.dag_hash = %(dag_hash)s::VARCHAR AND dag_run.span_status != %(span_status_1)s::VARCHAR)) AND (EXISTS (SELECT * 
FROM task_instance AS finished 
WHERE finished.id = %(finished_id)s::BIGINT AND (finished.state || '') = %(param_9)s::VARCHAR)) RETURNING task_instance.id, task_instance.dag_id, task_instance.run_id, task_instance.task_id, task_instance.try_number - %(try_number_2)s::INTEGER AS try_number, task_instance.queue, task_instance.context_carrier, task_instance.attempt_id AS attempt_id
