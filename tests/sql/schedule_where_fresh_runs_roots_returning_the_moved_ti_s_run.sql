-- schedule where fresh runs' roots returning the moved TI's run
UPDATE task_instance SET state=%(state)s::VARCHAR, scheduled_at=%(b_now)s::TIMESTAMP WITH TIME ZONE WHERE (task_instance.state || '') = %(param_1)s::VARCHAR AND task_instance.dag_run_id IN (__[POSTCOMPILE_runs]) AND task_instance.task_id IN (__[POSTCOMPILE_roots]) AND (task_instance.dag_run_id NOT IN (SELECT other.dag_run_id 
FROM task_instance AS other 
WHERE other.dag_run_id IN (__[POSTCOMPILE_runs]) AND other.state IN (%(param_2)s::VARCHAR, %(param_3)s::VARCHAR, %(param_4)s::VARCHAR, %(param_5)s::VARCHAR, %(param_6)s::VARCHAR, %(param_7)s::VARCHAR, %(param_8)s::VARCHAR, %(param_9)s::VARCHAR, %(param_10)s::VARCHAR))) RETURNING task_instance.id, task_instance.dag_run_id
