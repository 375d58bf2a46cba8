-- A scheduler's passes: the statements it sends for every run it decides
-- (`sluice.scheduler.scheduling`). A TI moves from 'none' to 'scheduled' by a
-- compare-and-set, its state compared through `|| ''` where the row is reached by its
-- key (a generic plan made on a small table would otherwise read the index on state).

-- name: schedule_fresh_roots
-- The roots `roots` of the runs `runs` none of whose TIs has left 'none', moved to
-- 'scheduled', returning each moved TI's id and run: by (dag_run_id, task_id), the
-- unique index. The runs with a TI in another state are found once, one equality per
-- state on ix_task_instance_run_state (not a scan of each run's TIs per root); the
-- subquery's snapshot predates the statement's own writes.
UPDATE task_instance
SET state = 'scheduled', scheduled_at = :now
WHERE (state || '') = 'none'
  AND dag_run_id = ANY(:runs::bigint[])
  AND task_id = ANY(:roots::varchar[])
  AND dag_run_id NOT IN (
      SELECT other.dag_run_id
      FROM task_instance AS other
      WHERE other.dag_run_id = ANY(:runs::bigint[])
        AND other.state IN ('scheduled', 'queued', 'running', 'success', 'failed',
                            'up_for_retry', 'up_for_reschedule', 'deferred',
                            'upstream_failed', 'skipped', 'removed')
  )
RETURNING id, dag_run_id;

-- name: run_tis_to_decide
-- Every TI of the run, with the results only of the tasks whose results decide
-- (`read_results`, from deps.results_that_decide): a mapped task's thousands of results
-- are not read.
SELECT
    id, task_id, state, next_retry_at,
    CASE WHEN task_id = ANY(:read_results::varchar[]) THEN result END AS result,
    map_index
FROM task_instance
WHERE dag_run_id = :run_pk;

-- name: active_runs_of_a_dag
-- Queued and running runs of one DAG (backfills aside): a scheduled run is created only
-- while they are fewer than max_active_runs, as Airflow does.
SELECT count(*) AS active
FROM dag_run
WHERE dag_id = :dag_id AND state IN ('queued', 'running') AND run_type <> 'backfill';
