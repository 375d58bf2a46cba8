-- upstream results
SELECT task_instance.task_id, task_instance.result 
FROM task_instance 
WHERE task_instance.dag_run_id = %(run_pk)s::BIGINT AND task_instance.task_id IN (__[POSTCOMPILE_task_ids])
