-- run has an unfinished TI
-- One row by (dag_run_id, state); the states as plain parameters (one_of), compiled once.
SELECT task_instance.id 
FROM task_instance 
WHERE task_instance.dag_run_id = %(run_pk)s::BIGINT AND task_instance.state IN (%(param_1)s::VARCHAR, %(param_2)s::VARCHAR, %(param_3)s::VARCHAR, %(param_4)s::VARCHAR, %(param_5)s::VARCHAR) 
 LIMIT %(param_6)s::INTEGER
