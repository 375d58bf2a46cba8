-- fan-in counting: all but the named
-- Returned by a fan-in upstream's result UPDATE: EXISTS another unfinished upstream (the
-- first found is enough; one equality per state on (dag_run_id, state)), TIs waiting in
-- the pools, and the freed pool's slots, its row locked, if TIs wait in it. A wide fan-in
-- names the few TIs that are not its upstreams.
EXISTS (SELECT * 
FROM task_instance AS other 
WHERE other.dag_run_id = %(run_pk)s::BIGINT AND other.state IN (%(param_1)s::VARCHAR, %(param_2)s::VARCHAR, %(param_3)s::VARCHAR, %(param_4)s::VARCHAR, %(param_5)s::VARCHAR) AND (other.task_id NOT IN (__[POSTCOMPILE_fan_in]))),
EXISTS (SELECT * 
FROM task_instance 
WHERE task_instance.state = 'scheduled' AND task_instance.pool IN (__[POSTCOMPILE_pools])),
(SELECT pool.slots 
FROM pool 
WHERE pool.name = %(lock_pool)s::VARCHAR AND (EXISTS (SELECT * 
FROM task_instance 
WHERE task_instance.state = 'scheduled' AND task_instance.pool = %(lock_pool)s::VARCHAR)) FOR UPDATE OF pool)
