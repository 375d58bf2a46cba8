-- upstream results
-- The upstream tasks' TIs, a mapped task's indexes in map-index order (its results are
-- passed as a list, of the indexes that succeeded).
SELECT task_instance.task_id, task_instance.map_index, task_instance.state, task_instance.attempt_id, CASE WHEN (task_instance.state = %(state_1)s::VARCHAR AND (%(known_attempts)s::VARCHAR LIKE '%%' || ',' || task_instance.attempt_id || ',' || '%%')) THEN NULL ELSE task_instance.result END AS result 
FROM task_instance 
WHERE task_instance.dag_run_id = %(run_pk)s::BIGINT AND (task_instance.task_id IN (__[POSTCOMPILE_task_ids]) OR task_instance.task_id = %(per_task)s::VARCHAR AND task_instance.map_index = %(map_index)s::INTEGER) ORDER BY task_instance.task_id, task_instance.map_index
