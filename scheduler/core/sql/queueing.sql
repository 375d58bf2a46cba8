-- What every queueing transaction (a scheduler's pass, a worker's decision) reads and
-- locks to count the room: the pool rows, locked plainly in name order by whoever
-- queues (the last lock taken), and the active TIs' usage (`queueing.Capacity`). A TI
-- is active in 'queued' or 'running' (states.TI_ACTIVE).

-- name: lock_every_pool
-- Every pool's row locked FOR UPDATE, in name order: two queueing transactions are
-- serialised and never over-fill a pool.
SELECT name, slots
FROM pool
ORDER BY name
FOR UPDATE;

-- name: lock_named_pools
-- As lock_every_pool, only the pools `names`.
SELECT name, slots
FROM pool
WHERE name = ANY(:names::varchar[])
ORDER BY name
FOR UPDATE;

-- name: active_usage
-- Queued and running TIs per pool and DAG, with the DAGs' limits: the room every
-- queueing transaction counts (the Python twin of queue_ti_if_room's conditions).
SELECT
    ti.pool, ti.dag_id,
    coalesce(sum(ti.pool_slots), 0) AS slots,
    count(*) AS tis,
    max(dag.max_active_tasks) AS max_active_tasks
FROM task_instance AS ti
LEFT JOIN dag ON dag.dag_id = ti.dag_id
WHERE ti.state IN ('queued', 'running')
GROUP BY ti.pool, ti.dag_id;
