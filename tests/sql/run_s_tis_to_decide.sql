-- run's TIs to decide
-- Every TI of the run, with the results only of the tasks whose results decide
-- (`deps.results_that_decide`): a mapped task's thousands of results are not read.
SELECT task_instance.id, task_instance.task_id, task_instance.state, task_instance.next_retry_at, CASE WHEN (task_instance.task_id IN (__[POSTCOMPILE_read_results])) THEN task_instance.result END AS anon_1, task_instance.map_index 
FROM task_instance 
WHERE task_instance.dag_run_id = %(run_pk)s::BIGINT
