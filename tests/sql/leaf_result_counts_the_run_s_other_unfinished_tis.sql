-- leaf result counts the run's other unfinished TIs
-- What the result of a task with no downstream returns, under the run's lock: whether
-- another TI of the run is unfinished (the first found is enough; one equality per state
-- on (dag_run_id, state)), and the freed pool's slots, its row locked, if TIs wait in it.
EXISTS (SELECT * 
FROM task_instance AS other, task_instance 
WHERE other.dag_run_id = %(run_pk)s::BIGINT AND other.state IN (%(param_1)s::VARCHAR, %(param_2)s::VARCHAR, %(param_3)s::VARCHAR, %(param_4)s::VARCHAR, %(param_5)s::VARCHAR) AND other.id != task_instance.id),
(SELECT pool.slots 
FROM pool 
WHERE pool.name = %(lock_pool)s::VARCHAR AND (EXISTS (SELECT * 
FROM task_instance 
WHERE task_instance.state = 'scheduled' AND task_instance.pool = %(lock_pool)s::VARCHAR)) FOR UPDATE OF pool)
