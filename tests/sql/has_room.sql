-- has room
-- The pool's used slots plus this TI's within its total, and its DAG under its max active
-- TIs. The DAG's active TIs are counted one state at a time (equalities on
-- ix_task_instance_dag_state): with state IN (...) a generic plan made on a small table
-- read every TI of the DAG. In the statement that queues, after the pool's lock.
(SELECT coalesce(sum(active.pool_slots), %(coalesce_2)s::INTEGER) AS coalesce_1 
FROM task_instance AS active 
WHERE active.state IN (%(param_1)s::VARCHAR, %(param_2)s::VARCHAR) AND active.pool = %(r_pool)s::VARCHAR) + %(r_slots)s::INTEGER <= %(r_pool_total)s::INTEGER AND (SELECT count(*) AS count_1 
FROM task_instance AS active 
WHERE active.dag_id = %(r_dag)s::VARCHAR AND active.state = %(param_3)s::VARCHAR) + (SELECT count(*) AS count_2 
FROM task_instance AS active 
WHERE active.dag_id = %(r_dag)s::VARCHAR AND active.state = %(param_4)s::VARCHAR) < %(r_max_active)s::INTEGER
