-- upstream results of the claimed TI
-- The upstream results, read in the claim's query (after its UPDATE) for a task whose
-- arguments take them: its run and its map index found by the claimed TI's key.
SELECT task_instance.task_id, task_instance.map_index, task_instance.state, task_instance.attempt_id, CASE WHEN (task_instance.state = %(state_1)s::VARCHAR AND (%(known_attempts)s::VARCHAR LIKE '%%' || ',' || task_instance.attempt_id || ',' || '%%')) THEN NULL ELSE task_instance.result END AS result 
FROM task_instance 
WHERE task_instance.dag_run_id = (SELECT task_instance.dag_run_id 
FROM task_instance 
WHERE task_instance.id = %(ti_id)s::BIGINT) AND (task_instance.task_id IN (__[POSTCOMPILE_task_ids]) OR task_instance.task_id = %(per_task)s::VARCHAR AND task_instance.map_index = (SELECT task_instance.map_index 
FROM task_instance 
WHERE task_instance.id = %(ti_id)s::BIGINT)) ORDER BY task_instance.task_id, task_instance.map_index
