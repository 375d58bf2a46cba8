-- A worker's decision in the result's transaction, after the run's lock (`run_lock`):
-- the TIs it reads, its result's write fused with that read, the one TI it queues, the
-- freed slot it fills, and whether the run has a TI left (`sluice.scheduler.decide`).
-- Lock order, as everywhere: the run's row, then its TIs, then pool rows. A TI is
-- unfinished in 'none', 'queued', 'running', 'scheduled', 'up_for_retry',
-- 'up_for_reschedule' or 'deferred'
-- (states.TI_UNFINISHED); active in 'queued' or 'running' (states.TI_ACTIVE).

-- name: read_run_tis
-- Every TI of a small run: for a fan-in in a small DAG, cheaper than naming the TIs.
-- Results only of the branch tasks in `branches` (a big fan-in reads its upstreams on
-- every result), trace carriers only of the `downstream`. `backlog`: TIs wait in the
-- pools concerned. `pool_total`: the slots of pool `lock_pool`, its row locked FOR
-- UPDATE in this statement (one round trip fewer; safe, the TIs it reads are the locked
-- run's); with `lock_pool` NULL, NULL and nothing locked.
SELECT
    id, task_id, state,
    CASE WHEN task_id = ANY(:branches::varchar[]) THEN result END AS result,
    try_number, queue, pool, pool_slots, priority_weight,
    CASE WHEN task_id = ANY(:downstream::varchar[]) THEN context_carrier END
        AS context_carrier,
    EXISTS (
        SELECT FROM task_instance AS waiting
        WHERE waiting.state = 'scheduled' AND waiting.pool = ANY(:pools::varchar[])
    ) AS backlog,
    (SELECT slots FROM pool WHERE name = :lock_pool FOR UPDATE OF pool) AS pool_total
FROM task_instance
WHERE dag_run_id = :run_pk;

-- name: read_named_tis
-- As read_run_tis, only the few TIs a decision needs (`task_ids`), from a run of any
-- size: by (dag_run_id, task_id), the unique index.
SELECT
    id, task_id, state,
    CASE WHEN task_id = ANY(:branches::varchar[]) THEN result END AS result,
    try_number, queue, pool, pool_slots, priority_weight,
    CASE WHEN task_id = ANY(:downstream::varchar[]) THEN context_carrier END
        AS context_carrier,
    EXISTS (
        SELECT FROM task_instance AS waiting
        WHERE waiting.state = 'scheduled' AND waiting.pool = ANY(:pools::varchar[])
    ) AS backlog,
    (SELECT slots FROM pool WHERE name = :lock_pool FOR UPDATE OF pool) AS pool_total
FROM task_instance
WHERE dag_run_id = :run_pk AND task_id = ANY(:task_ids::varchar[]);

-- name: write_success_reading_run_tis
-- A try's success (running -> success for its attempt, as write_success) and
-- read_run_tis in one statement: the read runs in the statement's snapshot, so it sees
-- the TI as it was before its write. `moved` (1 if the write won, else 0) is on every
-- row, and there is one row at least (the read is LEFT JOINed), so a won write is told
-- apart from an empty read.
WITH moved AS (
    UPDATE task_instance
    SET state = 'success', end_date = :now, result = :result, error = :error,
        next_retry_at = :next_retry_at
    WHERE id = :ti_id AND (state || '') = 'running' AND attempt_id = :attempt_id
    RETURNING id
)
SELECT m.moved, r.*
FROM (SELECT count(*) AS moved FROM moved) AS m
LEFT JOIN (
    SELECT
        id, task_id, state,
        CASE WHEN task_id = ANY(:branches::varchar[]) THEN result END AS result,
        try_number, queue, pool, pool_slots, priority_weight,
        CASE WHEN task_id = ANY(:downstream::varchar[]) THEN context_carrier END
            AS context_carrier,
        EXISTS (
            SELECT FROM task_instance AS waiting
            WHERE waiting.state = 'scheduled' AND waiting.pool = ANY(:pools::varchar[])
        ) AS backlog,
        (SELECT slots FROM pool WHERE name = :lock_pool FOR UPDATE OF pool) AS pool_total
    FROM task_instance
    WHERE dag_run_id = :run_pk
) AS r ON true;

-- name: write_success_reading_named_tis
-- As write_success_reading_run_tis, reading as read_named_tis.
WITH moved AS (
    UPDATE task_instance
    SET state = 'success', end_date = :now, result = :result, error = :error,
        next_retry_at = :next_retry_at
    WHERE id = :ti_id AND (state || '') = 'running' AND attempt_id = :attempt_id
    RETURNING id
)
SELECT m.moved, r.*
FROM (SELECT count(*) AS moved FROM moved) AS m
LEFT JOIN (
    SELECT
        id, task_id, state,
        CASE WHEN task_id = ANY(:branches::varchar[]) THEN result END AS result,
        try_number, queue, pool, pool_slots, priority_weight,
        CASE WHEN task_id = ANY(:downstream::varchar[]) THEN context_carrier END
            AS context_carrier,
        EXISTS (
            SELECT FROM task_instance AS waiting
            WHERE waiting.state = 'scheduled' AND waiting.pool = ANY(:pools::varchar[])
        ) AS backlog,
        (SELECT slots FROM pool WHERE name = :lock_pool FOR UPDATE OF pool) AS pool_total
    FROM task_instance
    WHERE dag_run_id = :run_pk AND task_id = ANY(:task_ids::varchar[])
) AS r ON true;

-- name: queue_ti_if_room
-- One decided TI (`none`) queued as `attempt_id`, through `scheduled` in the same write,
-- if it has room: its pool's used slots plus its `slots` within `pool_total`, and its
-- DAG under `max_active` active TIs. After the pool's lock (a statement of its own or
-- the read's): the room is counted with a snapshot taken after the lock was granted.
-- The DAG's active TIs are counted one state at a time (equalities on
-- ix_task_instance_dag_state): with state IN (...) a generic plan made on a small table
-- read every TI of the DAG.
UPDATE task_instance
SET state = 'queued', try_number = try_number + 1, attempt_id = :attempt_id,
    hostname = NULL, pid = NULL, scheduled_at = :now, queued_at = :now,
    queued_by_job_id = NULL
WHERE (state || '') = 'none' AND id = :ti_id
  AND (SELECT coalesce(sum(active.pool_slots), 0) FROM task_instance AS active
       WHERE active.state IN ('queued', 'running') AND active.pool = :pool)
      + :slots::integer
      <= :pool_total::integer
  AND (SELECT count(*) FROM task_instance AS active
       WHERE active.dag_id = :dag_id AND active.state = 'queued')
      + (SELECT count(*) FROM task_instance AS active
         WHERE active.dag_id = :dag_id AND active.state = 'running')
      < :max_active::integer
RETURNING id;

-- name: run_has_an_unfinished_ti
-- Whether a run has a TI left to finish: one row by (dag_run_id, state).
SELECT id
FROM task_instance
WHERE dag_run_id = :run_pk
  AND state IN ('none', 'queued', 'running', 'scheduled', 'up_for_retry',
                            'up_for_reschedule', 'deferred')
LIMIT 1;
