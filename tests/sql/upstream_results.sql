-- upstream results
-- The upstream tasks' TIs, a mapped task's indexes in map-index order (its results are
-- passed as a list, of the indexes that succeeded).
SELECT task_instance.task_id, task_instance.map_index, task_instance.state, task_instance.result 
FROM task_instance 
WHERE task_instance.dag_run_id = %(run_pk)s::BIGINT AND task_instance.task_id IN (__[POSTCOMPILE_task_ids]) ORDER BY task_instance.task_id, task_instance.map_index
