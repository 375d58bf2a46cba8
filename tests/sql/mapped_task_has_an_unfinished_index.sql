-- mapped task has an unfinished index
-- One row by (dag_run_id, state), then the task: another index of a mapped task not
-- finished (`plans.waits_for_every_index`).
SELECT task_instance.id 
FROM task_instance 
WHERE task_instance.dag_run_id = %(run_pk)s::BIGINT AND task_instance.state IN (%(param_1)s::VARCHAR, %(param_2)s::VARCHAR, %(param_3)s::VARCHAR, %(param_4)s::VARCHAR, %(param_5)s::VARCHAR) AND task_instance.task_id = %(task_id)s::VARCHAR 
 LIMIT %(param_6)s::INTEGER
