-- join next is ready: all_but
-- After its last upstream's result, under the run's lock: the join may run (as for its
-- queueing, but whether it fits): it joins the TIs waiting in its pool.
task_instance.dag_run_id = %(run_pk)s::BIGINT AND task_instance.task_id = %(next_task)s::VARCHAR AND (EXISTS (SELECT * 
FROM dag_run 
WHERE dag_run.id = %(run_pk)s::BIGINT AND (dag_run.state || '') = %(param_1)s::VARCHAR AND dag_run.claimed_by_job_id IS NULL AND dag_run.dag_hash = %(dag_hash)s::VARCHAR AND dag_run.span_status != %(span_status_1)s::VARCHAR)) AND (EXISTS (SELECT * 
FROM task_instance AS finished 
WHERE finished.id = %(finished_id)s::BIGINT AND (finished.state || '') = %(param_2)s::VARCHAR)) AND NOT (EXISTS (SELECT * 
FROM task_instance AS up 
WHERE up.dag_run_id = %(run_pk)s::BIGINT AND (up.task_id NOT IN (__[POSTCOMPILE_fan_in])) AND up.state != %(state_1)s::VARCHAR))
