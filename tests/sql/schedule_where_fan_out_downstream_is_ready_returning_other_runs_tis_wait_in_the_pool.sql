-- schedule where fan-out downstream is ready returning other runs' TIs wait in the pool
UPDATE task_instance SET state=%(state)s::VARCHAR, scheduled_at=%(b_now)s::TIMESTAMP WITH TIME ZONE WHERE (task_instance.state || '') = %(param_1)s::VARCHAR AND task_instance.dag_run_id = %(run_pk)s::BIGINT AND task_instance.task_id IN (__[POSTCOMPILE_downstream]) AND (EXISTS (SELECT * 
FROM dag_run 
WHERE dag_run.id = %(run_pk)s::BIGINT AND (dag_run.state || '') = %(param_2)s::VARCHAR AND dag_run.claimed_by_job_id IS NULL AND dag_run.dag_hash = %(dag_hash)s::VARCHAR AND dag_run.span_status != %(span_status_1)s::VARCHAR)) AND (EXISTS (SELECT * 
FROM task_instance AS finished 
WHERE finished.id = %(finished_id)s::BIGINT AND (finished.state || '') = %(param_3)s::VARCHAR)) RETURNING task_instance.id, EXISTS (SELECT * 
FROM task_instance AS elsewhere 
WHERE elsewhere.state = 'scheduled' AND elsewhere.pool = %(r_pool)s::VARCHAR AND elsewhere.dag_run_id != %(run_pk)s::BIGINT) AS backlog
