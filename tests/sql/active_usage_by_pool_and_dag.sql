-- active usage by pool and DAG
-- Queued and running TIs per pool and DAG, with the DAGs' limits: the room that every
-- queueing transaction counts (the Python twin of HAS_ROOM, `queueing.Capacity`).
SELECT task_instance.pool, task_instance.dag_id, coalesce(sum(task_instance.pool_slots), %(coalesce_2)s::INTEGER) AS coalesce_1, count(*) AS count_1, max(dag.max_active_tasks) AS max_1 
FROM task_instance LEFT OUTER JOIN dag ON dag.dag_id = task_instance.dag_id 
WHERE task_instance.state IN (%(param_1)s::VARCHAR, %(param_2)s::VARCHAR) GROUP BY task_instance.pool, task_instance.dag_id
