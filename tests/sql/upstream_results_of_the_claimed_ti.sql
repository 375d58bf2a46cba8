-- upstream results of the claimed TI
-- The upstream results, read in the claim's query (after its UPDATE) for a task whose
-- arguments take them: its run found by the claimed TI's key.
SELECT task_instance.task_id, task_instance.map_index, task_instance.state, task_instance.result 
FROM task_instance 
WHERE task_instance.dag_run_id = (SELECT task_instance.dag_run_id 
FROM task_instance 
WHERE task_instance.id = %(ti_id)s::BIGINT) AND task_instance.task_id IN (__[POSTCOMPILE_task_ids]) ORDER BY task_instance.task_id, task_instance.map_index
