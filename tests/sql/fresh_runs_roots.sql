-- fresh runs' roots
-- The roots of the runs none of whose TIs has left none, by (dag_run_id, task_id): the
-- unique index. The runs with a TI in another state are found once, one equality per state
-- on ix_task_instance_run_state (not a scan of each run's TIs per root); the subquery's
-- snapshot predates the statement's own writes.
task_instance.dag_run_id IN (__[POSTCOMPILE_runs]) AND task_instance.task_id IN (__[POSTCOMPILE_roots]) AND (task_instance.dag_run_id NOT IN (SELECT other.dag_run_id 
FROM task_instance AS other 
WHERE other.dag_run_id IN (__[POSTCOMPILE_runs]) AND other.state IN (%(param_1)s::VARCHAR, %(param_2)s::VARCHAR, %(param_3)s::VARCHAR, %(param_4)s::VARCHAR, %(param_5)s::VARCHAR, %(param_6)s::VARCHAR, %(param_7)s::VARCHAR, %(param_8)s::VARCHAR, %(param_9)s::VARCHAR)))
