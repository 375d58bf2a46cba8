-- claimed TI's context
-- What the claim's UPDATE returns: the run's and the DAG's columns by scalar subqueries on
-- their keys, so the claim is one statement.
task_instance.dag_id,
task_instance.run_id,
task_instance.task_id,
task_instance.try_number,
task_instance.max_tries,
task_instance.pool,
task_instance.map_index,
task_instance.dag_run_id,
(SELECT dag_run.logical_date 
FROM dag_run, task_instance 
WHERE dag_run.id = task_instance.dag_run_id),
(SELECT dag_run.dag_hash 
FROM dag_run, task_instance 
WHERE dag_run.id = task_instance.dag_run_id),
(SELECT dag_run.claimed_by_job_id 
FROM dag_run, task_instance 
WHERE dag_run.id = task_instance.dag_run_id),
(SELECT dag.fileloc 
FROM dag, task_instance 
WHERE dag.dag_id = task_instance.dag_id)
