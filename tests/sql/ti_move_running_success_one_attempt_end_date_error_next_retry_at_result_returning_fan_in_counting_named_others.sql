-- ti move running -> success (one, attempt; end_date,error,next_retry_at,result) returning fan-in counting: named others
UPDATE task_instance SET state=%(state)s::VARCHAR, end_date=%(v_end_date)s::TIMESTAMP WITH TIME ZONE, next_retry_at=%(v_next_retry_at)s::TIMESTAMP WITH TIME ZONE, result=%(v_result)s::VARCHAR, error=%(v_error)s::VARCHAR WHERE task_instance.id = %(b_id)s::BIGINT AND (task_instance.state || '') = %(param_1)s::VARCHAR AND task_instance.attempt_id = %(b_attempt)s::VARCHAR RETURNING task_instance.id, EXISTS (SELECT * 
FROM task_instance AS other 
WHERE other.dag_run_id = %(run_pk)s::BIGINT AND other.state IN (%(param_2)s::VARCHAR, %(param_3)s::VARCHAR, %(param_4)s::VARCHAR, %(param_5)s::VARCHAR, %(param_6)s::VARCHAR) AND other.task_id IN (__[POSTCOMPILE_fan_in])) AS unfinished, EXISTS (SELECT * 
FROM task_instance 
WHERE task_instance.state = 'scheduled' AND task_instance.pool IN (__[POSTCOMPILE_pools])) AS backlog, (SELECT pool.slots 
FROM pool 
WHERE pool.name = %(lock_pool)s::VARCHAR AND (EXISTS (SELECT * 
FROM task_instance 
WHERE task_instance.state = 'scheduled' AND task_instance.pool = %(lock_pool)s::VARCHAR)) FOR UPDATE OF pool) AS pool_total
