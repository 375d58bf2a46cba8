-- read named TIs, locking the pool
-- With the one pool row the ready downstream goes into locked in a scalar subquery (FOR
-- UPDATE): one round trip fewer; safe, the TIs it reads are the locked run's.
SELECT task_instance.id, task_instance.task_id, task_instance.state, CASE WHEN (task_instance.task_id IN (__[POSTCOMPILE_branches])) THEN task_instance.result END AS result, task_instance.try_number, task_instance.queue, task_instance.pool, task_instance.pool_slots, task_instance.priority_weight, CASE WHEN (task_instance.task_id IN (__[POSTCOMPILE_downstream])) THEN task_instance.context_carrier END AS context_carrier, EXISTS (SELECT * 
FROM task_instance 
WHERE task_instance.state = 'scheduled' AND task_instance.pool IN (__[POSTCOMPILE_pools])) AS backlog, (SELECT pool.slots 
FROM pool 
WHERE pool.name = %(lock_pool)s::VARCHAR FOR UPDATE OF pool) AS pool_total 
FROM task_instance 
WHERE task_instance.dag_run_id = %(run_pk)s::BIGINT AND task_instance.task_id IN (__[POSTCOMPILE_task_ids])
