-- fits its pool first
-- Nobody waits in the TI's pool (they would come first) and it has room, as HAS_ROOM.
NOT (EXISTS (SELECT * 
FROM task_instance AS waiting, task_instance 
WHERE waiting.state = 'scheduled' AND waiting.pool = task_instance.pool)) AND (SELECT coalesce(sum(active.pool_slots), %(coalesce_2)s::INTEGER) AS coalesce_1 
FROM task_instance AS active, task_instance 
WHERE active.state IN (%(param_1)s::VARCHAR, %(param_2)s::VARCHAR) AND active.pool = task_instance.pool) + task_instance.pool_slots <= (SELECT pool.slots 
FROM pool, task_instance 
WHERE pool.name = task_instance.pool) AND (SELECT count(*) AS count_1 
FROM task_instance AS active, task_instance 
WHERE active.dag_id = task_instance.dag_id AND active.state = %(param_3)s::VARCHAR) + (SELECT count(*) AS count_2 
FROM task_instance AS active, task_instance 
WHERE active.dag_id = task_instance.dag_id AND active.state = %(param_4)s::VARCHAR) < %(r_max_active)s::INTEGER
