-- A worker's result and what follows it: the statements `sluice.broker.worker.result`
-- sends in one query with their BEGIN and COMMIT (`scheduler.core.db.committed_at_once`,
-- `transaction_opened_by`). Lock order, as everywhere: the run's row, then its TIs, then
-- pool rows. The run's state and the TIs' states are compared through `|| ''` where a
-- row is reached by its key: a generic plan made on a small table would otherwise read
-- the index on state. `state = 'scheduled'` stays a literal: it is the predicate of the
-- partial index ix_task_instance_waiting. A TI is unfinished in 'none', 'queued',
-- 'running', 'scheduled', 'up_for_retry', 'up_for_reschedule' or 'deferred'
-- (states.TI_UNFINISHED). A worker's queueing
-- leaves queued_by_job_id NULL: no job queued the TI.

-- name: run_lock
-- The first statement of a result that decides its run: the run's row, if running,
-- locked FOR NO KEY UPDATE (a TI's foreign-key check, FOR KEY SHARE, never waits on it).
-- Its own statement: a statement that waits for a row lock keeps the snapshot it started
-- with for its other rows, so TIs read in it could miss the holder's result.
SELECT run_id, claimed_by_job_id, dag_hash, span_status
FROM dag_run
WHERE id = :run_pk AND (state || '') = 'running'
FOR NO KEY UPDATE;

-- name: lock_pool
-- One pool's row, locked: the statements after it count the pool's room once the lock
-- was granted (each statement takes its own snapshot).
SELECT name, slots
FROM pool
WHERE name = :pool
FOR UPDATE;

-- name: write_success
-- A try's success: running -> success for its attempt (a compare-and-set: a stale or
-- duplicate result changes nothing and returns no row).
UPDATE task_instance
SET state = 'success', end_date = :now, result = :result, error = :error,
    next_retry_at = :next_retry_at
WHERE id = :ti_id AND (state || '') = 'running' AND attempt_id = :attempt_id
RETURNING id;

-- name: write_success_counting_named_upstreams
-- A fan-in upstream's success, returning whether another of the fan-in's upstreams (the
-- named `fan_in`) is unfinished (EXISTS: the first found is enough; one equality per
-- state on (dag_run_id, state)), whether TIs wait in the pools concerned, and the freed
-- pool's slots with its row locked if TIs wait in it (else NULL, nothing locked). Under
-- the run's lock: exactly one of the last two results counts no other unfinished.
UPDATE task_instance
SET state = 'success', end_date = :now, result = :result, error = :error,
    next_retry_at = :next_retry_at
WHERE id = :ti_id AND (state || '') = 'running' AND attempt_id = :attempt_id
RETURNING
    id,
    EXISTS (
        SELECT FROM task_instance AS other
        WHERE other.dag_run_id = :run_pk
          AND other.state IN ('none', 'queued', 'running', 'scheduled', 'up_for_retry',
                            'up_for_reschedule', 'deferred')
          AND other.task_id = ANY(:fan_in::varchar[])
    ) AS unfinished,
    EXISTS (
        SELECT FROM task_instance AS waiting
        WHERE waiting.state = 'scheduled' AND waiting.pool = ANY(:pools::varchar[])
    ) AS backlog,
    (
        SELECT slots FROM pool
        WHERE name = :lock_pool
          AND EXISTS (
              SELECT FROM task_instance AS waiting
              WHERE waiting.state = 'scheduled' AND waiting.pool = :lock_pool
          )
        FOR UPDATE OF pool
    ) AS pool_total;

-- name: write_success_counting_all_but_named
-- As write_success_counting_named_upstreams, for a wide fan-in: its upstreams are the
-- run's TIs but the few named in `fan_in` (those that are not its upstreams).
UPDATE task_instance
SET state = 'success', end_date = :now, result = :result, error = :error,
    next_retry_at = :next_retry_at
WHERE id = :ti_id AND (state || '') = 'running' AND attempt_id = :attempt_id
RETURNING
    id,
    EXISTS (
        SELECT FROM task_instance AS other
        WHERE other.dag_run_id = :run_pk
          AND other.state IN ('none', 'queued', 'running', 'scheduled', 'up_for_retry',
                            'up_for_reschedule', 'deferred')
          AND other.task_id <> ALL(:fan_in::varchar[])
    ) AS unfinished,
    EXISTS (
        SELECT FROM task_instance AS waiting
        WHERE waiting.state = 'scheduled' AND waiting.pool = ANY(:pools::varchar[])
    ) AS backlog,
    (
        SELECT slots FROM pool
        WHERE name = :lock_pool
          AND EXISTS (
              SELECT FROM task_instance AS waiting
              WHERE waiting.state = 'scheduled' AND waiting.pool = :lock_pool
          )
        FOR UPDATE OF pool
    ) AS pool_total;

-- name: write_success_counting_the_run
-- The success of a task with no downstream, under the run's lock, returning whether
-- another TI of the run is unfinished (the first found is enough; one equality per state
-- on (dag_run_id, state)) and the freed pool's slots, its row locked, if TIs wait in it.
UPDATE task_instance
SET state = 'success', end_date = :now, result = :result, error = :error,
    next_retry_at = :next_retry_at
WHERE id = :ti_id AND (state || '') = 'running' AND attempt_id = :attempt_id
RETURNING
    id,
    EXISTS (
        SELECT FROM task_instance AS other
        WHERE other.dag_run_id = :run_pk
          AND other.state IN ('none', 'queued', 'running', 'scheduled', 'up_for_retry',
                            'up_for_reschedule', 'deferred')
          AND other.id <> task_instance.id
    ) AS unfinished,
    (
        SELECT slots FROM pool
        WHERE name = :lock_pool
          AND EXISTS (
              SELECT FROM task_instance AS waiting
              WHERE waiting.state = 'scheduled' AND waiting.pool = :lock_pool
          )
        FOR UPDATE OF pool
    ) AS pool_total;

-- name: write_success_counting_the_indexes
-- The success of one index of mapped task `counted_task`, under the run's lock,
-- returning whether another index of it is unfinished (by (dag_run_id, state)) and
-- whether TIs wait in its pool for the slot it frees.
UPDATE task_instance
SET state = 'success', end_date = :now, result = :result, error = :error,
    next_retry_at = :next_retry_at
WHERE id = :ti_id AND (state || '') = 'running' AND attempt_id = :attempt_id
RETURNING
    id,
    EXISTS (
        SELECT FROM task_instance AS sibling
        WHERE sibling.dag_run_id = :run_pk
          AND sibling.state IN ('none', 'queued', 'running', 'scheduled', 'up_for_retry',
                            'up_for_reschedule', 'deferred')
          AND sibling.task_id = :counted_task
          AND sibling.id <> task_instance.id
    ) AS unfinished,
    EXISTS (
        SELECT FROM task_instance AS waiter
        WHERE waiter.state = 'scheduled' AND waiter.pool = :lock_pool
    ) AS backlog;

-- name: queue_next_waiting
-- The slot a result freed, after the pool's lock: the first TI waiting in pool `pool`
-- (priority, then age) of a running run no job claimed, queued as `attempt_id` if it
-- fits the pool's free slots and its DAG's max_active_tasks (counted after the lock was
-- granted). SKIP LOCKED: a TI another writer is queueing is passed over. A TI waiting
-- for a limit (its concurrency key known, or a rate limit) is the schedulers' to queue.
UPDATE task_instance
SET state = 'queued', try_number = try_number + 1, attempt_id = :attempt_id,
    hostname = NULL, pid = NULL, queued_at = :now, queued_by_job_id = NULL
WHERE (state || '') = 'scheduled'
  AND id = (
      SELECT waiting.id
      FROM task_instance AS waiting JOIN dag_run ON dag_run.id = waiting.dag_run_id
      WHERE waiting.state = 'scheduled' AND waiting.pool = :pool
        AND dag_run.state = 'running' AND dag_run.claimed_by_job_id IS NULL
        AND waiting.concurrency_key IS NULL AND waiting.rate_limit IS NULL
      ORDER BY waiting.priority_weight DESC, waiting.scheduled_at, waiting.id
      LIMIT 1
      FOR UPDATE OF waiting SKIP LOCKED
  )
  AND (SELECT coalesce(sum(active.pool_slots), 0) FROM task_instance AS active
       WHERE active.state IN ('queued', 'running') AND active.pool = task_instance.pool)
      + task_instance.pool_slots
      <= (SELECT slots FROM pool WHERE name = :pool)
  AND (SELECT count(*) FROM task_instance AS active
       WHERE active.dag_id = task_instance.dag_id AND active.state = 'queued')
      + (SELECT count(*) FROM task_instance AS active
         WHERE active.dag_id = task_instance.dag_id AND active.state = 'running')
      < (SELECT max_active_tasks FROM dag WHERE dag.dag_id = task_instance.dag_id)
RETURNING id, dag_id, run_id, task_id, try_number - 1 AS try_number, queue,
    context_carrier;

-- name: queue_chain_next
-- In the query that writes its upstream's success, after the pool's lock: a chain's next
-- TI queued as `attempt_id` if the run is a worker's to drive (running, no job claimed
-- it, of DAG version `dag_hash`, its spans need no scheduler to continue them), the
-- upstream succeeded (the write before it won), nobody waits in its pool, and it fits
-- the pool's free slots and its DAG's `max_active`. Returns the message's fields (the
-- try number before the queueing bumped it).
UPDATE task_instance
SET state = 'queued', try_number = try_number + 1, attempt_id = :attempt_id,
    hostname = NULL, pid = NULL, scheduled_at = :now, queued_at = :now,
    queued_by_job_id = NULL
WHERE (state || '') = 'none'
  AND dag_run_id = :run_pk AND task_id = :next_task
  AND EXISTS (
      SELECT FROM dag_run
      WHERE dag_run.id = :run_pk AND (dag_run.state || '') = 'running'
        AND dag_run.claimed_by_job_id IS NULL AND dag_run.dag_hash = :dag_hash
        AND dag_run.span_status <> 'needs_continuance'
  )
  AND EXISTS (
      SELECT FROM task_instance AS finished
      WHERE finished.id = :finished_id AND (finished.state || '') = 'success'
  )
  AND NOT EXISTS (
      SELECT FROM task_instance AS waiting
      WHERE waiting.state = 'scheduled' AND waiting.pool = task_instance.pool
  )
  AND (SELECT coalesce(sum(active.pool_slots), 0) FROM task_instance AS active
       WHERE active.state IN ('queued', 'running') AND active.pool = task_instance.pool)
      + task_instance.pool_slots
      <= (SELECT slots FROM pool WHERE pool.name = task_instance.pool)
  AND (SELECT count(*) FROM task_instance AS active
       WHERE active.dag_id = task_instance.dag_id AND active.state = 'queued')
      + (SELECT count(*) FROM task_instance AS active
         WHERE active.dag_id = task_instance.dag_id AND active.state = 'running')
      < :max_active
RETURNING id, dag_id, run_id, task_id, try_number - 1 AS try_number, queue,
    context_carrier;

-- name: queue_join_next_named
-- After its last upstream's result, under the run's lock and the pool's: a fan-in queued
-- as for a chain's next (queue_chain_next), when none of its other upstreams (named in
-- `fan_in`) is anything but a success: the all_success rule in SQL, the twin of
-- tasks.trigger_rules.decide (tests/integration/test_decision_twins.py).
UPDATE task_instance
SET state = 'queued', try_number = try_number + 1, attempt_id = :attempt_id,
    hostname = NULL, pid = NULL, scheduled_at = :now, queued_at = :now,
    queued_by_job_id = NULL
WHERE (state || '') = 'none'
  AND dag_run_id = :run_pk AND task_id = :next_task
  AND EXISTS (
      SELECT FROM dag_run
      WHERE dag_run.id = :run_pk AND (dag_run.state || '') = 'running'
        AND dag_run.claimed_by_job_id IS NULL AND dag_run.dag_hash = :dag_hash
        AND dag_run.span_status <> 'needs_continuance'
  )
  AND EXISTS (
      SELECT FROM task_instance AS finished
      WHERE finished.id = :finished_id AND (finished.state || '') = 'success'
  )
  AND NOT EXISTS (
      SELECT FROM task_instance AS waiting
      WHERE waiting.state = 'scheduled' AND waiting.pool = task_instance.pool
  )
  AND (SELECT coalesce(sum(active.pool_slots), 0) FROM task_instance AS active
       WHERE active.state IN ('queued', 'running') AND active.pool = task_instance.pool)
      + task_instance.pool_slots
      <= (SELECT slots FROM pool WHERE pool.name = task_instance.pool)
  AND (SELECT count(*) FROM task_instance AS active
       WHERE active.dag_id = task_instance.dag_id AND active.state = 'queued')
      + (SELECT count(*) FROM task_instance AS active
         WHERE active.dag_id = task_instance.dag_id AND active.state = 'running')
      < :max_active
  AND NOT EXISTS (
      SELECT FROM task_instance AS up
      WHERE up.dag_run_id = :run_pk AND up.task_id = ANY(:fan_in::varchar[])
        AND up.state <> 'success'
  )
RETURNING id, dag_id, run_id, task_id, try_number - 1 AS try_number, queue,
    context_carrier;

-- name: queue_join_next_all_but_named
-- As queue_join_next_named, for a wide fan-in: its upstreams are the run's TIs but the
-- few named in `fan_in`.
UPDATE task_instance
SET state = 'queued', try_number = try_number + 1, attempt_id = :attempt_id,
    hostname = NULL, pid = NULL, scheduled_at = :now, queued_at = :now,
    queued_by_job_id = NULL
WHERE (state || '') = 'none'
  AND dag_run_id = :run_pk AND task_id = :next_task
  AND EXISTS (
      SELECT FROM dag_run
      WHERE dag_run.id = :run_pk AND (dag_run.state || '') = 'running'
        AND dag_run.claimed_by_job_id IS NULL AND dag_run.dag_hash = :dag_hash
        AND dag_run.span_status <> 'needs_continuance'
  )
  AND EXISTS (
      SELECT FROM task_instance AS finished
      WHERE finished.id = :finished_id AND (finished.state || '') = 'success'
  )
  AND NOT EXISTS (
      SELECT FROM task_instance AS waiting
      WHERE waiting.state = 'scheduled' AND waiting.pool = task_instance.pool
  )
  AND (SELECT coalesce(sum(active.pool_slots), 0) FROM task_instance AS active
       WHERE active.state IN ('queued', 'running') AND active.pool = task_instance.pool)
      + task_instance.pool_slots
      <= (SELECT slots FROM pool WHERE pool.name = task_instance.pool)
  AND (SELECT count(*) FROM task_instance AS active
       WHERE active.dag_id = task_instance.dag_id AND active.state = 'queued')
      + (SELECT count(*) FROM task_instance AS active
         WHERE active.dag_id = task_instance.dag_id AND active.state = 'running')
      < :max_active
  AND NOT EXISTS (
      SELECT FROM task_instance AS up
      WHERE up.dag_run_id = :run_pk AND up.task_id <> ALL(:fan_in::varchar[])
        AND up.state <> 'success'
  )
RETURNING id, dag_id, run_id, task_id, try_number - 1 AS try_number, queue,
    context_carrier;

-- name: schedule_join_ready_named
-- After queue_join_next_named in the same query: the fan-in, if that did not queue it
-- (no room, or TIs waiting in its pool) and it may run, moved to `scheduled`: it joins
-- the TIs waiting in its pool. Returns whether TIs of other runs waited in that pool
-- (from the statement's snapshot, by the partial index ix_task_instance_waiting).
UPDATE task_instance
SET state = 'scheduled', scheduled_at = :now
WHERE (state || '') = 'none'
  AND dag_run_id = :run_pk AND task_id = :next_task
  AND EXISTS (
      SELECT FROM dag_run
      WHERE dag_run.id = :run_pk AND (dag_run.state || '') = 'running'
        AND dag_run.claimed_by_job_id IS NULL AND dag_run.dag_hash = :dag_hash
        AND dag_run.span_status <> 'needs_continuance'
  )
  AND EXISTS (
      SELECT FROM task_instance AS finished
      WHERE finished.id = :finished_id AND (finished.state || '') = 'success'
  )
  AND NOT EXISTS (
      SELECT FROM task_instance AS up
      WHERE up.dag_run_id = :run_pk AND up.task_id = ANY(:fan_in::varchar[])
        AND up.state <> 'success'
  )
RETURNING
    id,
    EXISTS (
        SELECT FROM task_instance AS elsewhere
        WHERE elsewhere.state = 'scheduled' AND elsewhere.pool = :pool
          AND elsewhere.dag_run_id <> :run_pk
    ) AS backlog;

-- name: schedule_join_ready_all_but_named
-- As schedule_join_ready_named, for a wide fan-in (its upstreams: the run's TIs but the
-- few named in `fan_in`).
UPDATE task_instance
SET state = 'scheduled', scheduled_at = :now
WHERE (state || '') = 'none'
  AND dag_run_id = :run_pk AND task_id = :next_task
  AND EXISTS (
      SELECT FROM dag_run
      WHERE dag_run.id = :run_pk AND (dag_run.state || '') = 'running'
        AND dag_run.claimed_by_job_id IS NULL AND dag_run.dag_hash = :dag_hash
        AND dag_run.span_status <> 'needs_continuance'
  )
  AND EXISTS (
      SELECT FROM task_instance AS finished
      WHERE finished.id = :finished_id AND (finished.state || '') = 'success'
  )
  AND NOT EXISTS (
      SELECT FROM task_instance AS up
      WHERE up.dag_run_id = :run_pk AND up.task_id <> ALL(:fan_in::varchar[])
        AND up.state <> 'success'
  )
RETURNING
    id,
    EXISTS (
        SELECT FROM task_instance AS elsewhere
        WHERE elsewhere.state = 'scheduled' AND elsewhere.pool = :pool
          AND elsewhere.dag_run_id <> :run_pk
    ) AS backlog;

-- name: queue_fan_out
-- In the query that writes the success of their only upstream, after the pool's lock:
-- the downstream it made ready, ranked by priority (then id) with their running total
-- of slots, queued (the one of rank n as attempt_ids[n]) while they fit the pool's free
-- slots and their DAG's room (`max_active`), when nobody waits in the pool (they would
-- come first); of a run a worker drives, their upstream succeeded. The room is counted
-- once, after the pool's lock, not once per TI.
UPDATE task_instance
SET state = 'queued', try_number = task_instance.try_number + 1,
    attempt_id = (:attempt_ids::varchar[])[ready.rank],
    hostname = NULL, pid = NULL, scheduled_at = :now, queued_at = :now,
    queued_by_job_id = NULL
FROM (
    SELECT ranked.id,
           sum(ranked.pool_slots) OVER by_priority AS slots,
           row_number() OVER by_priority AS rank
    FROM task_instance AS ranked
    WHERE ranked.dag_run_id = :run_pk AND ranked.task_id = ANY(:downstream::varchar[])
      AND ranked.state = 'none'
    WINDOW by_priority AS (ORDER BY ranked.priority_weight DESC, ranked.id)
) AS ready
WHERE (task_instance.state || '') = 'none'
  AND task_instance.id = ready.id
  AND ready.slots
      <= (SELECT slots FROM pool WHERE name = :pool)
         - (SELECT coalesce(sum(active.pool_slots), 0) FROM task_instance AS active
            WHERE active.state IN ('queued', 'running') AND active.pool = :pool)
  AND ready.rank
      <= :max_active
         - ((SELECT count(*) FROM task_instance AS active
             WHERE active.dag_id = :dag_id AND active.state = 'queued')
            + (SELECT count(*) FROM task_instance AS active
               WHERE active.dag_id = :dag_id AND active.state = 'running'))
  AND NOT EXISTS (
      SELECT FROM task_instance AS in_line
      WHERE in_line.state = 'scheduled' AND in_line.pool = :pool
  )
  AND EXISTS (
      SELECT FROM dag_run
      WHERE dag_run.id = :run_pk AND (dag_run.state || '') = 'running'
        AND dag_run.claimed_by_job_id IS NULL AND dag_run.dag_hash = :dag_hash
        AND dag_run.span_status <> 'needs_continuance'
  )
  AND EXISTS (
      SELECT FROM task_instance AS finished
      WHERE finished.id = :finished_id AND (finished.state || '') = 'success'
  )
RETURNING task_instance.id, task_instance.dag_id, task_instance.run_id,
    task_instance.task_id, task_instance.try_number - 1 AS try_number,
    task_instance.queue, task_instance.context_carrier, task_instance.attempt_id;

-- name: schedule_fan_out_ready
-- After queue_fan_out in the same query: the ready downstream it did not queue, moved
-- to `scheduled` (by (dag_run_id, task_id), the unique index), returning whether TIs of
-- other runs waited in the pool before them.
UPDATE task_instance
SET state = 'scheduled', scheduled_at = :now
WHERE (state || '') = 'none'
  AND dag_run_id = :run_pk AND task_id = ANY(:downstream::varchar[])
  AND EXISTS (
      SELECT FROM dag_run
      WHERE dag_run.id = :run_pk AND (dag_run.state || '') = 'running'
        AND dag_run.claimed_by_job_id IS NULL AND dag_run.dag_hash = :dag_hash
        AND dag_run.span_status <> 'needs_continuance'
  )
  AND EXISTS (
      SELECT FROM task_instance AS finished
      WHERE finished.id = :finished_id AND (finished.state || '') = 'success'
  )
RETURNING
    id,
    EXISTS (
        SELECT FROM task_instance AS elsewhere
        WHERE elsewhere.state = 'scheduled' AND elsewhere.pool = :pool
          AND elsewhere.dag_run_id <> :run_pk
    ) AS backlog;
