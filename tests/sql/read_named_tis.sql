-- read named TIs
-- The few TIs a decision needs, by (dag_run_id, task_id): the unique index.
SELECT task_instance.id, task_instance.task_id, task_instance.state, CASE WHEN (task_instance.task_id IN (__[POSTCOMPILE_branches])) THEN task_instance.result END AS result, task_instance.try_number, task_instance.queue, task_instance.pool, task_instance.pool_slots, task_instance.priority_weight, CASE WHEN (task_instance.task_id IN (__[POSTCOMPILE_downstream])) THEN task_instance.context_carrier END AS context_carrier, EXISTS (SELECT * 
FROM task_instance 
WHERE task_instance.state = 'scheduled' AND task_instance.pool IN (__[POSTCOMPILE_pools])) AS backlog 
FROM task_instance 
WHERE task_instance.dag_run_id = %(run_pk)s::BIGINT AND task_instance.task_id IN (__[POSTCOMPILE_task_ids])
