-- ti move queued -> running (one, attempt; end_date,hostname,last_heartbeat_at,pid,start_date) returning claimed TI's context, as sent
UPDATE task_instance SET state=%(state)s::VARCHAR, hostname=%(v_hostname)s::VARCHAR, pid=%(v_pid)s::INTEGER, start_date=%(v_start_date)s::TIMESTAMP WITH TIME ZONE, end_date=%(v_end_date)s::TIMESTAMP WITH TIME ZONE, last_heartbeat_at=%(v_last_heartbeat_at)s::TIMESTAMP WITH TIME ZONE WHERE task_instance.id = %(b_id)s::BIGINT AND (task_instance.state || '') = %(param_1)s::VARCHAR AND task_instance.attempt_id = %(b_attempt)s::VARCHAR AND (task_instance.dag_id || '') = %(m_dag)s::VARCHAR AND (task_instance.run_id || '') = %(m_run)s::VARCHAR AND (task_instance.task_id || '') = %(m_task)s::VARCHAR RETURNING task_instance.id, task_instance.dag_id, task_instance.run_id, task_instance.task_id, task_instance.try_number, task_instance.max_tries, task_instance.pool, task_instance.map_index, task_instance.dag_run_id AS run_pk, (SELECT dag_run.logical_date 
FROM dag_run 
WHERE dag_run.id = task_instance.dag_run_id) AS logical_date, (SELECT dag_run.dag_hash 
FROM dag_run 
WHERE dag_run.id = task_instance.dag_run_id) AS dag_hash, (SELECT dag_run.claimed_by_job_id 
FROM dag_run 
WHERE dag_run.id = task_instance.dag_run_id) AS claimed_by_job_id, (SELECT dag.fileloc 
FROM dag 
WHERE dag.dag_id = task_instance.dag_id) AS fileloc
