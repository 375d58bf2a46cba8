-- fan-out downstream fit, by priority
-- The downstream a success made ready, ranked by priority (then id) with their running
-- total of slots: those within the pool's free slots and their DAG's room, when nobody
-- waits in the pool (they would come first). The room is counted once, after the pool's
-- lock, not once per TI.
task_instance.id = ready.id AND ready.slots <= (SELECT pool.slots 
FROM pool 
WHERE pool.name = %(r_pool)s::VARCHAR) - (SELECT coalesce(sum(active.pool_slots), %(coalesce_2)s::INTEGER) AS coalesce_1 
FROM task_instance AS active 
WHERE active.state IN (%(param_1)s::VARCHAR, %(param_2)s::VARCHAR) AND active.pool = %(r_pool)s::VARCHAR) AND ready.rank <= %(r_max_active)s - ((SELECT count(*) AS count_1 
FROM task_instance AS active 
WHERE active.dag_id = %(r_dag)s::VARCHAR AND active.state = %(param_3)s::VARCHAR) + (SELECT count(*) AS count_2 
FROM task_instance AS active 
WHERE active.dag_id = %(r_dag)s::VARCHAR AND active.state = %(param_4)s::VARCHAR)) AND NOT (EXISTS (SELECT * 
FROM task_instance AS in_line 
WHERE in_line.state = 'scheduled' AND in_line.pool = %(r_pool)s::VARCHAR)) AND (EXISTS (SELECT * 
FROM dag_run 
WHERE dag_run.id = %(run_pk)s::BIGINT AND (dag_run.state || '') = %(param_5)s::VARCHAR AND dag_run.claimed_by_job_id IS NULL AND dag_run.dag_hash = %(dag_hash)s::VARCHAR AND dag_run.span_status != %(span_status_1)s::VARCHAR)) AND (EXISTS (SELECT * 
FROM task_instance AS finished 
WHERE finished.id = %(finished_id)s::BIGINT AND (finished.state || '') = %(param_6)s::VARCHAR))
