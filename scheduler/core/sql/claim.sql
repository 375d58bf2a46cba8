-- A try's claim and the upstream results its arguments take: the statements every task
-- sends before its code runs (`sluice.broker.worker.runner`, `upstream_results`).

-- name: claim_try
-- The claim of a try: queued -> running for the message's attempt, by this worker's
-- host and pid, returning what the try needs of its run and its DAG (scalar subqueries
-- on their keys: the claim is one statement; `bundle_version`, the commit a git
-- bundle's run keeps, NULL for a folder's; `waiting`, the row's own: a resumed try's
-- trigger event or a sensor's state between pokes, NULL for any other). The code a try runs is the claimed row's:
-- a message whose ids disagree with its TI's claims nothing (stale), whatever its ti_id
-- and attempt_id. `state`, `dag_id`, `run_id` and `task_id` are compared through
-- `|| ''`: the row is reached by its key whatever the statistics (on `dag_id` itself a
-- plan made while the table was small reads the DAG's every TI by
-- ix_task_instance_dag_state to claim one).
UPDATE task_instance
SET state = 'running',
    hostname = :hostname,
    pid = :pid,
    start_date = :now,
    end_date = NULL,
    last_heartbeat_at = :now
WHERE id = :ti_id
  AND (state || '') = 'queued'
  AND attempt_id = :attempt_id
  AND (dag_id || '') = :dag_id
  AND (run_id || '') = :run_id
  AND (task_id || '') = :task_id
RETURNING
    id, dag_id, run_id, task_id, try_number, max_tries, pool, map_index, waiting,
    dag_run_id AS run_pk,
    (SELECT logical_date FROM dag_run WHERE dag_run.id = task_instance.dag_run_id)
        AS logical_date,
    (SELECT dag_hash FROM dag_run WHERE dag_run.id = task_instance.dag_run_id)
        AS dag_hash,
    (SELECT claimed_by_job_id FROM dag_run WHERE dag_run.id = task_instance.dag_run_id)
        AS claimed_by_job_id,
    (SELECT bundle_version FROM dag_run WHERE dag_run.id = task_instance.dag_run_id)
        AS bundle_version,
    (SELECT fileloc FROM dag WHERE dag.dag_id = task_instance.dag_id) AS fileloc;

-- name: upstream_results_of_the_claimed_ti
-- The upstream results, read in the claim's query (after its UPDATE) for a task whose
-- arguments take them: its run and its map index found by the claimed TI's key. The
-- rows of the upstream tasks `task_ids` and, of `per_task` (the task mapped one to one;
-- '' for none), the claimed index's alone: two index scans, OR-ed. A success's result is
-- left out when its attempt id is in `known_attempts`, the process's copies
-- (',a1,a2,': each id matched whole, between commas).
SELECT
    task_id, map_index, state, attempt_id,
    CASE WHEN state = 'success'
              AND :known_attempts::varchar LIKE '%,' || attempt_id || ',%'
         THEN NULL ELSE result END AS result
FROM task_instance
WHERE dag_run_id = (SELECT dag_run_id FROM task_instance WHERE id = :ti_id)
  AND (task_id = ANY(:task_ids::varchar[])
       OR task_id = :per_task::varchar
          AND map_index = (SELECT map_index FROM task_instance WHERE id = :ti_id))
ORDER BY task_id, map_index;

-- name: upstream_results
-- The upstream tasks' TIs of run `run_pk`, a mapped task's indexes in map-index order
-- (its results are passed as a list, of the indexes that succeeded); of `per_task`,
-- index `map_index`'s alone. Results of known attempts left out, as above.
SELECT
    task_id, map_index, state, attempt_id,
    CASE WHEN state = 'success'
              AND :known_attempts::varchar LIKE '%,' || attempt_id || ',%'
         THEN NULL ELSE result END AS result
FROM task_instance
WHERE dag_run_id = :run_pk
  AND (task_id = ANY(:task_ids::varchar[])
       OR task_id = :per_task::varchar AND map_index = :map_index)
ORDER BY task_id, map_index;

-- name: run_conf
-- The conf of the claimed try's run, the asset events that triggered it and its type (a
-- scheduled run covers an interval of its schedule), by its key (read only when its task
-- takes the context).
SELECT conf, triggering_events, run_type
FROM dag_run
WHERE id = :run_pk;
